"""gpt2_model.py - a GPT-2 in PyTorch with Hugging Face's GPT2LMHeadModel
layout and state_dict names (Conv1D weights (in, out), `transformer.` before
every tensor but an untied head's; a tied head uses transformer.wte.weight
and has no tensor of its own), written here so the checks need no
transformers library. Shared by gpt2_check.py (the cross-check),
tests/bench/gpt2_vs_torch.py (speed), tests/training/gpt2_text.py (a
training run) and gpt2_dropout_check.py (dropout: nanoGPT's three places,
active in train() mode only)."""

import math

import torch
import torch.nn.functional as F


class Conv1D(torch.nn.Module):
    """Hugging Face's Conv1D: y = x W + b with W (in, out)."""

    def __init__(self, nin, nout, bias=True):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.empty(nin, nout).normal_(0.0, 0.02))
        self.bias = torch.nn.Parameter(torch.zeros(nout)) if bias else None

    def forward(self, x):
        y = x @ self.weight
        return y + self.bias if self.bias is not None else y


class Block(torch.nn.Module):
    """One GPT-2 block with Hugging Face's module names."""

    def __init__(self, n_embd, n_head, bias=True, dropout=0.0):
        super().__init__()
        c = n_embd
        self.n_head = n_head
        self.dropout = dropout
        self.ln_1 = torch.nn.LayerNorm(c, elementwise_affine=True)
        self.attn = torch.nn.Module()
        self.attn.c_attn = Conv1D(c, 3 * c, bias)
        self.attn.c_proj = Conv1D(c, c, bias)
        self.ln_2 = torch.nn.LayerNorm(c)
        self.mlp = torch.nn.Module()
        self.mlp.c_fc = Conv1D(c, 4 * c, bias)
        self.mlp.c_proj = Conv1D(4 * c, c, bias)
        if not bias:
            for ln in (self.ln_1, self.ln_2):
                ln.bias = None

    def forward(self, x):
        n, t, c = x.shape
        q, k, v = self.attn.c_attn(self.ln_1(x)).split(c, dim=2)
        hs = c // self.n_head
        q, k, v = (z.view(n, t, self.n_head, hs).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
        mask = torch.tril(torch.ones(t, t, dtype=torch.bool, device=att.device))
        att = F.softmax(att.masked_fill(~mask, float("-inf")), dim=-1)
        att = F.dropout(att, self.dropout, self.training) if self.dropout else att
        y = (att @ v).transpose(1, 2).contiguous().view(n, t, c)
        x = x + self.drop(self.attn.c_proj(y))
        return x + self.drop(self.mlp.c_proj(F.gelu(self.mlp.c_fc(self.ln_2(x)),
                                                     approximate="tanh")))

    def drop(self, x):
        return F.dropout(x, self.dropout, self.training) if self.dropout else x


class GPT2(torch.nn.Module):
    """GPT2LMHeadModel's layout; a tied head uses wte.weight and has no module."""

    def __init__(self, vocab, n_layer, n_head, n_embd, positions, tied=True, bias=True,
                 dropout=0.0):
        super().__init__()
        self.dropout = dropout
        self.transformer = torch.nn.Module()
        self.transformer.wte = torch.nn.Embedding(vocab, n_embd)
        self.transformer.wpe = torch.nn.Embedding(positions, n_embd)
        self.transformer.h = torch.nn.ModuleList(
            [Block(n_embd, n_head, bias, dropout) for _ in range(n_layer)])
        self.transformer.ln_f = torch.nn.LayerNorm(n_embd)
        if not bias:
            self.transformer.ln_f.bias = None
        self.tied = tied
        if not tied:
            self.lm_head = torch.nn.Linear(n_embd, vocab, bias=False)

    def forward(self, idx):
        tr = self.transformer
        x = tr.wte(idx) + tr.wpe(torch.arange(idx.shape[1], device=idx.device))
        if self.dropout:
            x = F.dropout(x, self.dropout, self.training)
        for b in tr.h:
            x = b(x)
        x = tr.ln_f(x)
        return F.linear(x, tr.wte.weight if self.tied else self.lm_head.weight)
