/* report.c - tables, JSON and CSV output of the pipeline-run program (report.h). */
#include "cli/report.h"
#include "cli/outputs.h"

#include "pipeline/fit.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "partitioner/emit.h"

const char *pp_cli_bytes(double bytes, char *buf, size_t n)
{
    const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (bytes >= 1024 && u < 4) {
        bytes /= 1024;
        u++;
    }
    snprintf(buf, n, u ? "%.1f %s" : "%.0f %s", bytes, units[u]);
    return buf;
}

/* A stage's layer items joined with ", " (malloc'd; NULL when out of memory). */
static char *join_layers(const pp_stage_report *sr)
{
    size_t len = 1;
    for (int i = 0; i < sr->n_layers; i++) len += strlen(sr->layers[i]) + 2;
    char *s = malloc(len);
    if (!s) return NULL;
    s[0] = '\0';
    for (int i = 0; i < sr->n_layers; i++) {
        if (i) strcat(s, ", ");
        strcat(s, sr->layers[i]);
    }
    return s;
}

void pp_cli_print_epoch(FILE *f, const pp_epoch_row *row, int epochs)
{
    fprintf(f, "epoch %*d/%d", epochs >= 10 ? 2 : 1, row->epoch, epochs);
    if (row->partial)
        fprintf(f, " (%d of %d step%s)", row->steps, row->steps_of, row->steps_of == 1 ? "" : "s");
    fprintf(f, "  train loss %.4f  train acc %.4f", row->train_loss, row->train_acc);
    if (row->evaluated)
        fprintf(f, "  test loss %.4f  test acc %.4f  top-5 %.4f", row->test_loss, row->test_acc,
                row->test_top5);
    fprintf(f, "  %.1f s  %.0f img/s\n", row->seconds, row->images_per_s);
    fflush(f);
}

/* The summary's line of an evaluation. */
/* "0,1": the ranks of a replica. */
static void join_ranks(const pp_replica_report *rr, char *buf, size_t n)
{
    size_t len = 0;
    buf[0] = '\0';
    for (int i = 0; i < rr->n_ranks && len < n; i++)
        len += (size_t)snprintf(buf + len, n - len, "%s%d", i ? "," : "", rr->ranks[i]);
}

/* A row per data-parallel replica: its ranks, batch piece and times. */
static void print_replicas(FILE *f, const pp_pipeline *p, int replicas)
{
    fprintf(f, "\n%-7s  %-12s  %5s  %9s  %9s  %9s\n", "replica", "ranks", "batch", "step ms",
            "run ms", "images/s");
    for (int k = 0; k < replicas; k++) {
        pp_replica_report rr;
        pp_pipeline_replica_report(p, k, &rr);
        char ranks[64];
        join_ranks(&rr, ranks, sizeof ranks);
        fprintf(f, "%-7d  %-12s  %5d  %9.1f  %9.1f  %9.1f\n", k, ranks, rr.batch, rr.step_ms,
                rr.run_ms, rr.images_per_s);
    }
}

/* The loader limits the step when the step waits for its batch for more
 * than this fraction of it. */
#define LOADER_LIMIT 0.05

static bool loader_limited(const pp_pipeline_report *r)
{
    return r->step_ms_median > 0 && r->data_wait_ms > LOADER_LIMIT * r->step_ms_median;
}

/* A source's line where a cache may stand behind it (what: "N tokens of the
 * text"; made: how it is made without the cache, "tokenized"): from the
 * cache, or made (and cached). */
static void cached_line(FILE *f, const char *what, const char *cache_name, const char *made,
                        bool from_cache, bool cached, double seconds, const char *cache)
{
    if (from_cache)
        fprintf(f, "data         %s from the %s in %.2f s (%s)\n", what, cache_name, seconds,
                cache ? cache : "?");
    else
        fprintf(f, "data         %s, %s in %.2f s%s%s%s\n", what, made, seconds,
                cached ? " and cached (" : "", cached && cache ? cache : "", cached ? ")" : "");
}

static void evicted_line(FILE *f, int files, int64_t bytes, const char *cache_name,
                         const char *env)
{
    if (files > 0)
        fprintf(f, "data         %d file%s (%.1f MB) evicted from the %s, the least recently "
                   "used, to keep it within %s\n", files, files == 1 ? "" : "s",
                (double)bytes / 1e6, cache_name, env);
}

/* The line of a text read through the tokenizer (tokens 0: none). */
static void tokenized_line(FILE *f, const char *of, int64_t tokens, bool from_cache,
                           bool cached, double seconds, const char *cache)
{
    char what[128];
    if (tokens <= 0) return;
    snprintf(what, sizeof what, "%lld tokens of %s", (long long)tokens, of);
    cached_line(f, what, "token cache", "tokenized", from_cache, cached, seconds, cache);
}

/* The line of an image folder indexed when the plan was read. */
static void indexed_line(FILE *f, const char *of, const pp_plan_data *d)
{
    char what[160];
    if (d->format != PP_PLAN_DATA_IMAGEFOLDER || d->index.images <= 0) return;
    snprintf(what, sizeof what, "%lld images in %d classes (%s)", (long long)d->index.images,
             d->classes_found, of);
    cached_line(f, what, "image index cache", "indexed", d->index.from_cache,
                d->index.cached, d->index.seconds, d->index.cache_path);
    evicted_line(f, d->index.evicted, d->index.evicted_bytes, "image index cache",
                 "PP_IMAGE_INDEX_CACHE_MAX");
}

/* The loader's line: its threads and depth, the wait per step, and what to
 * do when it, not the pipeline, limits the step; how the image folders'
 * indexes and the texts' tokens came and what their caches evicted; bad
 * images skipped. */
static void print_data_line(FILE *f, const pp_plan *plan, const pp_pipeline_report *r)
{
    const double frac = r->step_ms_median > 0 ? r->data_wait_ms / r->step_ms_median : 0;
    fprintf(f, "data         %d thread%s, %d batch%s ahead: %.2f ms wait per step (%.1f%% of "
               "the step, median)\n", r->data_workers, r->data_workers == 1 ? "" : "s",
            r->data_prefetch, r->data_prefetch == 1 ? "" : "es", r->data_wait_ms, 100 * frac);
    if (loader_limited(r))
        fprintf(f, "data         the loader, not the pipeline, limits the step: it waits %.0f%% "
                   "of the step for data (raise data.workers, now %d, or data.prefetch, now %d; "
                   "or decode smaller files)\n", 100 * frac, r->data_workers, r->data_prefetch);
    indexed_line(f, "the folder", &plan->data);
    if (plan->eval.enabled) indexed_line(f, "the test set's folder", &plan->eval.data);
    tokenized_line(f, "the text", r->text_tokens, r->text_from_cache, r->text_cached,
                   r->text_tokenize_s, r->text_cache_path);
    tokenized_line(f, "the test set's text", r->eval_text_tokens, r->eval_text_from_cache,
                   r->eval_text_cached, r->eval_text_tokenize_s, r->eval_text_cache_path);
    evicted_line(f, r->text_cache_evicted, r->text_cache_evicted_bytes, "token cache",
                 "PP_TOKEN_CACHE_MAX");
    if (r->bad_images > 0)
        fprintf(f, "data         %lld bad image%s skipped and replaced (data.on_bad_image: skip); "
                   "the first: %s\n", (long long)r->bad_images, r->bad_images == 1 ? "" : "s",
                r->bad_image_first ? r->bad_image_first : "?");
}

/* Before the first step the report is all zero: what the plan says instead. */
static void report_unrun(const pp_plan *plan, pp_pipeline_report *r)
{
    if (r->steps > 0) return;
    int ranks = 1;
    for (int s = 0; !plan->replicas_in_process && s < plan->n_stages; s++)
        for (int k = 0; k < (plan->replicas > 1 ? plan->replicas : 1); k++) {
            int rank = k ? plan->stages[s].replica_rank[k] : plan->stages[s].rank;
            if (rank + 1 > ranks) ranks = rank + 1;
        }
    r->ranks = ranks;
    r->replicas = plan->replicas > 1 ? plan->replicas : 1;
    if (!r->graphs) r->graphs = "n/a";
}

/* Samples of a token model hold its block_size tokens each. */
static int tokens_per_sample(const pp_plan *plan)
{
    return plan->model.kind == PP_MODEL_GPT2 ? plan->data.block_size : 0;
}

void pp_cli_print_eval(FILE *f, const pp_plan *plan, const char *label, const pp_eval_result *e)
{
    const int t = tokens_per_sample(plan);
    if (t > 0)
        fprintf(f, "%sloss %.4f, perplexity %.2f, next-token accuracy %.4f (%lld windows of %d "
                   "tokens, %.0f tokens/s)\n",
                label, e->loss, e->perplexity, e->accuracy, (long long)e->samples, t,
                e->images_per_s * t);
    else
        fprintf(f, "%sloss %.4f, accuracy %.4f, top-5 %.4f (%lld images, %.0f images/s)\n",
                label, e->loss, e->accuracy, e->top5_accuracy, (long long)e->samples,
                e->images_per_s);
}

void pp_cli_print_summary(FILE *f, const pp_plan *plan, const pp_pipeline *p,
                          const double *losses, int n_losses, const pp_eval_result *last_eval,
                          const pp_cli_run_info *run)
{
    pp_pipeline_report r;
    pp_pipeline_report_get(p, &r);
    report_unrun(plan, &r);
    int n = pp_pipeline_stage_count(p);
    int width = 6; /* the layers column fits the longest list */
    char *lists[PP_PLAN_MAX_STAGES] = {0};
    for (int s = 0; s < n && s < PP_PLAN_MAX_STAGES; s++) {
        pp_stage_report sr;
        pp_pipeline_stage_report(p, s, &sr);
        lists[s] = join_layers(&sr);
        int len = lists[s] ? (int)strlen(lists[s]) : 0;
        if (len > width) width = len;
    }
    int dev_width = 8; /* "rank1:cpu:0" in a job of several processes */
    for (int s = 0; s < n; s++) {
        pp_stage_report sr;
        pp_pipeline_stage_report(p, s, &sr);
        char dev[32];
        int len = snprintf(dev, sizeof dev, "rank%d:%s", sr.rank, sr.device);
        if (r.ranks > 1 && len > dev_width) dev_width = len;
    }
    /* replicas: the time of each stage's gradient sum over them */
    const bool grads = r.replicas > 1;
    fprintf(f, "\n%-5s  %-*s  %-*s  %11s  %9s  %9s  %5s  %10s%s\n", "stage", dev_width, "device",
            width, "layers", "params", "fwd ms", "bwd ms", "busy", "peak mem",
            grads ? "   grads ms" : "");
    for (int s = 0; s < n; s++) {
        pp_stage_report sr;
        pp_pipeline_stage_report(p, s, &sr);
        char mem[32], dev[32];
        if (r.ranks > 1)
            snprintf(dev, sizeof dev, "rank%d:%s", sr.rank, sr.device);
        else
            snprintf(dev, sizeof dev, "%s", sr.device);
        const char *list = s < PP_PLAN_MAX_STAGES && lists[s] && lists[s][0] ? lists[s] : "(delay)";
        fprintf(f, "%-5d  %-*s  %-*s  %11lld  %9.2f  %9.2f  %4.0f%%  %10s", s, dev_width, dev, width,
                list, (long long)sr.params, sr.forward_ms,
                sr.backward_ms, 100 * sr.busy_frac,
                pp_cli_bytes((double)sr.peak_bytes, mem, sizeof mem));
        if (grads) fprintf(f, "  %9.2f", sr.grads_ms);
        fputc('\n', f);
    }
    for (int s = 0; s < n && s < PP_PLAN_MAX_STAGES; s++) free(lists[s]);
    if (r.replicas > 1) print_replicas(f, p, r.replicas);
    char cb[32];
    fprintf(f, "\n%s, %s, batch %d = %d micro-batch%s of <= %d, %d step%s\n", plan->model.name,
            pp_plan_schedule_name(plan->schedule), plan->batch_size, plan->micro_batches,
            plan->micro_batches == 1 ? "" : "es", plan->split_size, r.steps,
            r.steps == 1 ? "" : "s");
    if (r.steps == 0 && run && !run->interrupted) { /* nothing ran: no figures to give */
        fprintf(f, "no steps left: the run had finished (step %lld)\n",
                (long long)run->steps_done);
        if (last_eval) pp_cli_print_eval(f, plan, "test         ", last_eval);
        return;
    }
    if (tokens_per_sample(plan) > 0)
        fprintf(f, "throughput   %.0f tokens/s (%.1f windows/s)\n",
                r.images_per_s * tokens_per_sample(plan), r.images_per_s);
    else
        fprintf(f, "throughput   %.1f images/s\n", r.images_per_s);
    fprintf(f, "step time    %.1f ms median (min %.1f, max %.1f%s)\n", r.step_ms_median,
            r.step_ms_min, r.step_ms_max, r.steps > 1 ? ", first step excluded" : "");
    fprintf(f, "bubble       %.1f%% measured, %.1f%% predicted (predicted step %.1f ms)\n",
            100 * r.bubble_frac, 100 * r.bubble_frac_predicted, r.predicted_step_ms);
    if (n > 1)
        fprintf(f, "copies       %s per step, %.2f ms (medians)\n",
                pp_cli_bytes((double)r.copy_bytes, cb, sizeof cb), r.copy_ms);
    for (int s = 0; s + 1 < n; s++) { /* boundaries between ranks, as the prediction saw them */
        pp_stage_report a, b;
        pp_pipeline_stage_report(p, s, &a);
        pp_pipeline_stage_report(p, s + 1, &b);
        if (a.link_gbps > 0)
            fprintf(f, "link         stages %d -> %d (rank %d -> %d): %.2f GB/s, %.1f us "
                       "latency, measured at start\n", s, s + 1, a.rank, b.rank, a.link_gbps,
                    1e3 * a.link_latency_ms);
    }
    print_data_line(f, plan, &r);
    if (strcmp(r.graphs, "n/a") != 0)
        fprintf(f, "cuda graphs  %s: %d step%s captured, %d replayed%s%s\n", r.graphs,
                r.graph_captures, r.graph_captures == 1 ? "" : "s", r.graph_replays,
                r.graph_refusal ? "; " : "", r.graph_refusal ? r.graph_refusal : "");
    if (n_losses > 0)
        fprintf(f, "loss         %.4f first step, %.4f last step\n", losses[0],
                losses[n_losses - 1]);
    if (n_losses > 0 && run && run->grad_norms)
        fprintf(f, "grad norm    %.4f first step, %.4f last step (clipped to %g)\n",
                run->grad_norms[0], run->grad_norms[n_losses - 1], plan->optimizer.clip_grad_norm);
    if (last_eval) pp_cli_print_eval(f, plan, "test         ", last_eval);
}

static json_t *json_num(double v);

static json_t *eval_object(const pp_eval_result *e)
{
    return json_pack("{s:I, s:o, s:o, s:o, s:o, s:o, s:o}", "samples", (json_int_t)e->samples,
                     "loss", json_num(e->loss), "perplexity", json_num(e->perplexity),
                     "accuracy", json_num(e->accuracy), "top5_accuracy",
                     json_num(e->top5_accuracy), "seconds", json_num(e->seconds),
                     "images_per_s", json_num(e->images_per_s));
}

static json_t *json_num(double v)
{
    return isfinite(v) ? json_real(v) : json_null();
}

/* data.tokenized: {tokens, from_cache, cached, seconds, cache} */
static json_t *tokenized_json(int64_t tokens, bool from_cache, bool cached, double seconds,
                              const char *cache)
{
    return json_pack("{s:I, s:b, s:b, s:o, s:s?}", "tokens", (json_int_t)tokens, "from_cache",
                     from_cache, "cached", cached, "seconds", json_num(seconds), "cache", cache);
}

/* data.indexed: {images, classes, from_cache, cached, seconds, cache,
 * evicted: {files, bytes}} */
static json_t *indexed_json(const pp_plan_data *d)
{
    const pp_plan_index *n = &d->index;
    return json_pack("{s:I, s:i, s:b, s:b, s:o, s:s?, s:{s:i, s:I}}", "images",
                     (json_int_t)n->images, "classes", d->classes_found, "from_cache",
                     n->from_cache, "cached", n->cached, "seconds", json_num(n->seconds),
                     "cache", n->cache_path[0] ? n->cache_path : NULL, "evicted", "files",
                     n->evicted, "bytes", (json_int_t)n->evicted_bytes);
}

/* The keys every JSON output starts with: what ran. */
/* per_replica: [{replica, ranks, batch, step_ms, run_ms, images_per_s}] */
static json_t *replicas_array(const pp_pipeline *p, int replicas)
{
    json_t *a = json_array();
    for (int k = 0; a && k < replicas; k++) {
        pp_replica_report rr;
        pp_pipeline_replica_report(p, k, &rr);
        json_t *ranks = json_array();
        for (int i = 0; ranks && i < rr.n_ranks; i++)
            json_array_append_new(ranks, json_integer(rr.ranks[i]));
        json_array_append_new(a, json_pack("{s:i, s:o, s:i, s:o, s:o, s:o}", "replica", k,
                                           "ranks", ranks ? ranks : json_array(), "batch",
                                           rr.batch, "step_ms", json_num(rr.step_ms), "run_ms",
                                           json_num(rr.run_ms), "images_per_s",
                                           json_num(rr.images_per_s)));
    }
    return a ? a : json_array();
}

static json_t *plan_object(const pp_plan *plan)
{
    json_t *o = json_object();
    if (!o) return NULL;
    json_object_set_new(o, "plan", json_string(plan->path));
    json_object_set_new(o, "model", json_string(plan->model.name));
    json_object_set_new(o, "schedule", json_string(pp_plan_schedule_name(plan->schedule)));
    json_object_set_new(o, "precision", json_string(pp_plan_precision_name(plan->precision)));
    json_object_set_new(o, "batch_size", json_integer(plan->batch_size));
    return o;
}

/* Writes o on one line and releases it. */
static bool dump(FILE *f, json_t *o)
{
    int rc = json_dumpf(o, f, JSON_COMPACT | JSON_PRESERVE_ORDER);
    fputc('\n', f);
    json_decref(o);
    return rc == 0;
}

bool pp_cli_print_plan_json(FILE *f, const pp_plan *plan)
{
    char *text;
    size_t len;
    pp_error err;
    if (pp_plan_emit(plan, &text, &len, &err) != PP_OK) return false;
    json_t *o = plan_object(plan), *stages = json_array();
    if (!o || !stages) {
        free(text);
        json_decref(o);
        json_decref(stages);
        return false;
    }
    json_object_set_new(o, "valid", json_true());
    json_object_set_new(o, "split_size", json_integer(plan->split_size));
    json_object_set_new(o, "micro_batches", json_integer(plan->micro_batches));
    json_object_set_new(o, "steps", json_integer(plan->steps));
    json_object_set_new(o, "epochs", json_integer(plan->epochs));
    json_object_set_new(o, "replicas", json_integer(plan->replicas));
    for (int s = 0; s < plan->n_stages; s++) {
        const pp_plan_stage *st = &plan->stages[s];
        json_t *layers = json_array();
        for (int u = st->first; layers && u >= 0 && u <= st->last;) {
            char item[64];
            u = pp_plan_spell_item(&plan->catalogue, u, st->last, item, sizeof item);
            json_array_append_new(layers, json_string(item));
        }
        json_array_append_new(stages, json_pack("{s:i, s:s, s:o}", "rank", st->rank, "device",
                                                st->device_name,
                                                "layers", layers ? layers : json_array()));
    }
    json_object_set_new(o, "stages", stages);
    json_object_set_new(o, "resolved", json_stringn(text, len));
    free(text);
    return dump(f, o);
}

bool pp_cli_print_json(FILE *f, const pp_plan *plan, const pp_pipeline *p, const double *losses,
                       int n_losses, const pp_epoch_row *epochs, int n_epochs,
                       const pp_eval_result *last_eval, const pp_cli_run_info *run)
{
    pp_pipeline_report r;
    pp_pipeline_report_get(p, &r);
    report_unrun(plan, &r);
    json_t *o = plan_object(plan);
    json_t *lj = json_array();
    json_t *stages = json_array();
    if (!o || !lj || !stages) return false;
    json_object_set_new(o, "split_size", json_integer(plan->split_size));
    json_object_set_new(o, "micro_batches", json_integer(plan->micro_batches));
    json_object_set_new(o, "steps", json_integer(r.steps));
    json_object_set_new(o, "step_ms",
                        json_pack("{s:o, s:o, s:o}", "median", json_num(r.step_ms_median), "min",
                                  json_num(r.step_ms_min), "max", json_num(r.step_ms_max)));
    json_object_set_new(o, "images_per_s", json_num(r.images_per_s));
    json_object_set_new(o, "predicted_step_ms", json_num(r.predicted_step_ms));
    json_object_set_new(o, "bubble_frac", json_num(r.bubble_frac));
    json_object_set_new(o, "bubble_frac_predicted", json_num(r.bubble_frac_predicted));
    json_object_set_new(o, "devices", json_integer(r.devices));
    json_object_set_new(
        o, "data",
        json_pack("{s:i, s:i, s:o, s:o, s:b, s:I}", "workers", r.data_workers, "prefetch",
                  r.data_prefetch, "wait_ms", json_num(r.data_wait_ms), "wait_frac",
                  json_num(r.step_ms_median > 0 ? r.data_wait_ms / r.step_ms_median : 0),
                  "loader_limited", loader_limited(&r), "bad_images", (json_int_t)r.bad_images));
    json_t *dj = json_object_get(o, "data");
    if (dj && plan->data.format == PP_PLAN_DATA_IMAGEFOLDER) /* how the index came */
        json_object_set_new(dj, "indexed", indexed_json(&plan->data));
    if (dj && plan->eval.enabled && plan->eval.data.format == PP_PLAN_DATA_IMAGEFOLDER)
        json_object_set_new(dj, "eval_indexed", indexed_json(&plan->eval.data));
    if (dj && r.text_tokens > 0) /* a text through the tokenizer: how its ids came */
        json_object_set_new(dj, "tokenized",
                            tokenized_json(r.text_tokens, r.text_from_cache, r.text_cached,
                                           r.text_tokenize_s, r.text_cache_path));
    if (dj && r.eval_text_tokens > 0)
        json_object_set_new(dj, "eval_tokenized",
                            tokenized_json(r.eval_text_tokens, r.eval_text_from_cache,
                                           r.eval_text_cached, r.eval_text_tokenize_s,
                                           r.eval_text_cache_path));
    if (dj && (r.text_tokens > 0 || r.eval_text_tokens > 0))
        json_object_set_new(dj, "token_cache_evicted",
                            json_pack("{s:i, s:I}", "files", r.text_cache_evicted, "bytes",
                                      (json_int_t)r.text_cache_evicted_bytes));
    if (r.schedule_note) json_object_set_new(o, "schedule_note", json_string(r.schedule_note));
    for (int i = 0; i < n_losses; i++) json_array_append_new(lj, json_num(losses[i]));
    json_object_set_new(o, "losses", lj);
    if (run && run->grad_norms) { /* each step's gradient norm before clipping */
        json_t *gj = json_array();
        for (int i = 0; gj && i < n_losses; i++)
            json_array_append_new(gj, json_num(run->grad_norms[i]));
        json_object_set_new(o, "grad_norms", gj);
    }
    /* the memory model's prediction of each stage's device peak, beside the measured one */
    pp_fit_stage pred[PP_PLAN_MAX_STAGES];
    pp_error perr;
    const bool predicted = pp_fit_predict(plan, pred, &perr) == PP_OK;
    for (int s = 0; s < pp_pipeline_stage_count(p); s++) {
        pp_stage_report sr;
        pp_pipeline_stage_report(p, s, &sr);
        json_t *layers = json_array();
        for (int i = 0; i < sr.n_layers; i++)
            json_array_append_new(layers, json_string(sr.layers[i]));
        json_t *so = json_pack("{s:s, s:i, s:i, s:o, s:I, s:o, s:o, s:o, s:I, s:i, s:i, s:o}",
                               "device", sr.device, "rank", sr.rank, "schedule_device",
                               sr.schedule_device, "layers", layers, "params",
                               (json_int_t)sr.params, "forward_ms", json_num(sr.forward_ms),
                               "backward_ms", json_num(sr.backward_ms), "busy_frac",
                               json_num(sr.busy_frac), "peak_bytes", (json_int_t)sr.peak_bytes,
                               "max_in_flight", sr.max_in_flight, "in_flight", sr.in_flight,
                               "bubble_predicted", json_num(sr.bubble_predicted));
        /* the split backward's parts, when the schedule has them */
        if (so && (sr.input_ms > 0 || sr.weight_ms > 0)) {
            json_object_set_new(so, "input_ms", json_num(sr.input_ms));
            json_object_set_new(so, "weight_ms", json_num(sr.weight_ms));
        }
        if (so && predicted)
            json_object_set_new(so, "predicted_peak_bytes", json_integer(pred[s].device_peak));
        /* replicas: the stage's gradient sum over them (absent without) */
        if (so && r.replicas > 1) json_object_set_new(so, "grads_ms", json_num(sr.grads_ms));
        /* the boundary to the next stage on another rank (absent without) */
        if (so && sr.link_gbps > 0)
            json_object_set_new(so, "link", json_pack("{s:o, s:o}", "gbps",
                                                      json_num(sr.link_gbps), "latency_ms",
                                                      json_num(sr.link_latency_ms)));
        json_array_append_new(stages, so);
    }
    json_object_set_new(o, "stages", stages);
    json_object_set_new(o, "ranks", json_integer(r.ranks));
    json_object_set_new(o, "replicas", json_integer(r.replicas));
    json_object_set_new(o, "cuda_graphs",
                        json_pack("{s:s, s:i, s:i, s:i, s:s?}", "mode", r.graphs, "captured",
                                  r.graph_captures, "replayed", r.graph_replays, "launches",
                                  r.graph_launches, "refused", r.graph_refusal));
    if (r.replicas > 1) json_object_set_new(o, "per_replica", replicas_array(p, r.replicas));
    json_object_set_new(o, "copies", json_pack("{s:I, s:o}", "bytes", (json_int_t)r.copy_bytes,
                                               "ms", json_num(r.copy_ms)));
    if (n_epochs > 0) {
        json_t *ej = json_array();
        for (int i = 0; i < n_epochs; i++) {
            const pp_epoch_row *e = &epochs[i];
            json_t *row = json_pack("{s:i, s:o, s:o, s:o}", "epoch", e->epoch, "train_loss",
                                    json_num(e->train_loss), "train_acc", json_num(e->train_acc),
                                    "seconds", json_num(e->seconds));
            json_object_set_new(row, "test_loss", e->evaluated ? json_num(e->test_loss) : json_null());
            json_object_set_new(row, "test_acc", e->evaluated ? json_num(e->test_acc) : json_null());
            json_object_set_new(row, "test_top5",
                                e->evaluated ? json_num(e->test_top5) : json_null());
            json_object_set_new(row, "images_per_s", json_num(e->images_per_s));
            if (e->partial) {
                json_object_set_new(row, "partial", json_true());
                json_object_set_new(row, "steps", json_integer(e->steps));
            }
            json_array_append_new(ej, row);
        }
        json_object_set_new(o, "epochs", ej);
    }
    if (last_eval) json_object_set_new(o, "eval", eval_object(last_eval));
    if (run) {
        json_object_set_new(o, "steps_done", json_integer((json_int_t)run->steps_done));
        json_object_set_new(o, "steps_left", json_integer((json_int_t)run->steps_left));
        json_object_set_new(o, "resumed_from", run->resumed_from >= 0
                                                   ? json_integer((json_int_t)run->resumed_from)
                                                   : json_null());
        json_object_set_new(o, "interrupted",
                            run->interrupted ? json_string(run->interrupted) : json_null());
    }
    return dump(f, o);
}

bool pp_cli_print_eval_json(FILE *f, const pp_plan *plan, const pp_eval_result *e)
{
    json_t *o = plan_object(plan);
    if (!o) return false;
    json_object_set_new(o, "eval", eval_object(e));
    return dump(f, o);
}

bool pp_cli_print_simulation_json(FILE *f, const pp_plan *plan, const pp_pipeline_prediction *pr)
{
    json_t *o = plan_object(plan);
    json_t *stages = json_array();
    if (!o || !stages) return false;
    json_object_set_new(o, "split_size", json_integer(plan->split_size));
    json_object_set_new(o, "micro_batches", json_integer(plan->micro_batches));
    json_object_set_new(o, "devices", json_integer(pr->devices));
    json_object_set_new(o, "predicted_step_ms", json_num(pr->step_ms));
    json_object_set_new(o, "bubble_frac_predicted", json_num(pr->bubble));
    json_object_set_new(o, "images_per_s_predicted",
                        json_num(pr->step_ms > 0 ? plan->batch_size * 1000.0 / pr->step_ms : 0));
    if (pr->note[0]) json_object_set_new(o, "schedule_note", json_string(pr->note));
    for (int s = 0; s < plan->n_stages; s++)
        json_array_append_new(stages, json_pack("{s:s, s:i, s:o, s:o, s:o, s:o, s:i, s:o, s:I}",
                                                "device", plan->stages[s].device_name,
                                                "schedule_device", pr->stage_device[s],
                                                "forward_ms", json_num(pr->forward_ms[s]),
                                                "backward_ms", json_num(pr->backward_ms[s]),
                                                "input_ms", json_num(pr->input_ms[s]),
                                                "weight_ms", json_num(pr->weight_ms[s]),
                                                "in_flight", pr->in_flight[s],
                                                "bubble_predicted", json_num(pr->device_bubble[s]),
                                                "memory_bytes_estimate",
                                                (json_int_t)pr->memory_bytes[s]));
    json_object_set_new(o, "stages", stages);
    return dump(f, o);
}

void pp_cli_progress(FILE *f, int done, int total, double loss, double grad_norm,
                     double images_per_s, double seconds_left)
{
    const int width = 24;
    int fill = total > 0 ? done * width / total : width;
    char bar[32];
    for (int i = 0; i < width; i++) bar[i] = i < fill ? '=' : (i == fill ? '>' : ' ');
    bar[width] = '\0';
    int left = seconds_left > 0 && seconds_left < 1e7 ? (int)(seconds_left + 0.5) : 0;
    fprintf(f, "\r\033[K step %d/%d [%s] loss %.4f", done, total, bar, loss);
    if (grad_norm >= 0) fprintf(f, " | norm %.3g", grad_norm);
    fprintf(f, " | %.1f img/s | %d:%02d left", images_per_s, left / 60, left % 60);
    fflush(f);
}

void pp_cli_print_sweep(FILE *f, const pp_sweep_row *rows, int n)
{
    fprintf(f, "%10s  %13s  %12s  %10s  %12s  %10s  %10s\n", "split_size", "micro_batches",
            "step ms", "images/s", "predicted ms", "bubble", "predicted");
    for (int i = 0; i < n; i++) {
        if (rows[i].failed) {
            fprintf(f, "%10d  %13d  failed: %s\n", rows[i].split_size, rows[i].micro_batches,
                    rows[i].error);
            continue;
        }
        fprintf(f, "%10d  %13d  %12.1f  %10.1f  %12.1f  %9.1f%%  %9.1f%%\n", rows[i].split_size,
                rows[i].micro_batches, rows[i].step_ms, rows[i].images_per_s,
                rows[i].predicted_step_ms, 100 * rows[i].bubble, 100 * rows[i].bubble_predicted);
    }
}

bool pp_cli_sweep_writes_files(const char *csv, const char *svg, int done, const char *stopped,
                               const char *what)
{
    if (done > 0 || !stopped) return true;
    if (csv || svg)
        fprintf(stderr, "pipeline-run: no %s finished: %s%s%s not written\n", what,
                csv ? csv : "", csv && svg ? " and " : "", svg ? svg : "");
    return false;
}

bool pp_cli_write_sweep_csv(const char *path, const pp_sweep_row *rows, int n)
{
    pp_cli_output out;
    FILE *f = pp_cli_output_open(&out, path);
    if (!f) return false;
    fprintf(f, "split_size,micro_batches,step_ms,images_per_s,predicted_step_ms,bubble_frac,"
               "bubble_frac_predicted,loss,error\n");
    for (int i = 0; i < n; i++) {
        if (rows[i].failed) { /* the error as one quoted field */
            fprintf(f, "%d,%d,,,,,,,\"", rows[i].split_size, rows[i].micro_batches);
            for (const char *c = rows[i].error; *c; c++) fputs(*c == '"' ? "\"\"" : (char[]){*c, 0}, f);
            fputs("\"\n", f);
            continue;
        }
        fprintf(f, "%d,%d,%.3f,%.3f,%.3f,%.5f,%.5f,%.6f,\n", rows[i].split_size,
                rows[i].micro_batches, rows[i].step_ms, rows[i].images_per_s,
                rows[i].predicted_step_ms, rows[i].bubble, rows[i].bubble_predicted,
                rows[i].loss);
    }
    return pp_cli_output_commit(&out);
}

bool pp_cli_sweep_json(FILE *f, const pp_plan *plan, const pp_sweep_row *rows, int n,
                       const char *interrupted)
{
    json_t *o = plan_object(plan);
    json_t *arr = json_array();
    if (!o || !arr) return false;
    for (int i = 0; i < n; i++) {
        json_t *row = rows[i].failed
                          ? json_pack("{s:i, s:i, s:s}", "split_size", rows[i].split_size,
                                      "micro_batches", rows[i].micro_batches, "error",
                                      rows[i].error)
                          : json_pack("{s:i, s:i, s:o, s:o, s:o, s:o, s:o}", "split_size",
                                      rows[i].split_size, "micro_batches", rows[i].micro_batches,
                                      "step_ms", json_num(rows[i].step_ms), "images_per_s",
                                      json_num(rows[i].images_per_s), "predicted_step_ms",
                                      json_num(rows[i].predicted_step_ms), "bubble_frac",
                                      json_num(rows[i].bubble), "bubble_frac_predicted",
                                      json_num(rows[i].bubble_predicted));
        json_array_append_new(arr, row);
    }
    json_object_set_new(o, "sweep", arr);
    if (interrupted) json_object_set_new(o, "interrupted", json_string(interrupted));
    return dump(f, o);
}

/* ---- schedule sweeps --------------------------------------------------------------- */

static int64_t row_peak(const pp_schedule_row *r)
{
    int64_t mx = 0;
    for (int s = 0; s < r->stages; s++)
        if (r->peak_bytes[s] > mx) mx = r->peak_bytes[s];
    return mx;
}

/* "4,3,2,1" (the first 16 stages) into buf. */
static const char *join_ints(const int *v, int n, const char *sep, char *buf, size_t len)
{
    size_t k = 0;
    buf[0] = '\0';
    for (int i = 0; i < n && k < len; i++)
        k += (size_t)snprintf(buf + k, len - k, "%s%d", i ? sep : "", v[i]);
    return buf;
}

void pp_cli_print_schedule_sweep(FILE *f, const pp_schedule_row *rows, int n)
{
    fprintf(f, "%-16s  %6s  %7s  %10s  %7s  %12s  %9s  %10s  %s\n", "schedule", "stages",
            "devices", "step ms", "bubble", "predicted ms", "predicted", "peak mem",
            "in flight per stage");
    for (int i = 0; i < n; i++) {
        const pp_schedule_row *r = &rows[i];
        if (r->failed) {
            fprintf(f, "%-16s  failed: %s\n", r->schedule, r->error);
            continue;
        }
        char mem[32], fl[256];
        fprintf(f, "%-16s  %6d  %7d  %10.1f  %6.1f%%  %12.1f  %8.1f%%  %10s  %s%s\n", r->schedule,
                r->stages, r->devices, r->step_ms, 100 * r->bubble, r->predicted_step_ms,
                100 * r->bubble_predicted, pp_cli_bytes((double)row_peak(r), mem, sizeof mem),
                join_ints(r->in_flight, r->stages, ",", fl, sizeof fl),
                r->simulated ? "  (simulated)" : "");
    }
    for (int i = 0; i < n; i++)
        if (rows[i].note[0]) fprintf(f, "note: %s\n", rows[i].note);
}

bool pp_cli_write_schedule_sweep_csv(const char *path, const pp_schedule_row *rows, int n)
{
    pp_cli_output out;
    FILE *f = pp_cli_output_open(&out, path);
    if (!f) return false;
    fprintf(f, "schedule,stages,devices,micro_batches,simulated,step_ms,bubble_frac,"
               "predicted_step_ms,bubble_frac_predicted,peak_bytes,in_flight,note,error\n");
    for (int i = 0; i < n; i++) {
        const pp_schedule_row *r = &rows[i];
        char fl[512];
        fprintf(f, "%s,%d,%d,%d,%d,", r->schedule, r->stages, r->devices, r->micro_batches,
                r->simulated);
        if (!r->failed) {
            fprintf(f, "%.3f,%.5f,%.3f,%.5f,", r->step_ms, r->bubble, r->predicted_step_ms,
                    r->bubble_predicted);
            for (int s = 0; s < r->stages; s++)
                fprintf(f, "%s%lld", s ? ";" : "", (long long)r->peak_bytes[s]);
            fprintf(f, ",%s,", join_ints(r->in_flight, r->stages, ";", fl, sizeof fl));
        } else {
            fprintf(f, ",,,,,,");
        }
        const char *text[2] = {r->note, r->error};
        for (int k = 0; k < 2; k++) { /* quoted fields */
            fputc('"', f);
            for (const char *c = text[k]; *c; c++) fputs(*c == '"' ? "\"\"" : (char[]){*c, 0}, f);
            fputc('"', f);
            fputc(k ? '\n' : ',', f);
        }
    }
    return pp_cli_output_commit(&out);
}

bool pp_cli_schedule_sweep_json(FILE *f, const pp_plan *plan, const pp_schedule_row *rows, int n,
                                const char *interrupted)
{
    json_t *o = plan_object(plan);
    json_t *arr = json_array();
    if (!o || !arr) return false;
    for (int i = 0; i < n; i++) {
        const pp_schedule_row *r = &rows[i];
        json_t *row = json_pack("{s:s, s:i, s:i, s:i, s:b}", "schedule", r->schedule, "stages",
                                r->stages, "devices", r->devices, "micro_batches",
                                r->micro_batches, "simulated", r->simulated);
        if (!row) continue;
        if (r->failed) {
            json_object_set_new(row, "error", json_string(r->error));
        } else {
            json_t *fl = json_array(), *pk = json_array();
            for (int s = 0; s < r->stages; s++) {
                json_array_append_new(fl, json_integer(r->in_flight[s]));
                json_array_append_new(pk, json_integer((json_int_t)r->peak_bytes[s]));
            }
            json_object_set_new(row, "step_ms", json_num(r->step_ms));
            json_object_set_new(row, "bubble_frac", json_num(r->bubble));
            json_object_set_new(row, "predicted_step_ms", json_num(r->predicted_step_ms));
            json_object_set_new(row, "bubble_frac_predicted", json_num(r->bubble_predicted));
            json_object_set_new(row, "in_flight", fl);
            json_object_set_new(row, "peak_bytes", pk);
            if (r->note[0]) json_object_set_new(row, "note", json_string(r->note));
        }
        json_array_append_new(arr, row);
    }
    json_object_set_new(o, "schedules", arr);
    if (interrupted) json_object_set_new(o, "interrupted", json_string(interrupted));
    return dump(f, o);
}
