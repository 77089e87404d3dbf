/*
 * emu.h - what a C test asks of the CUDA emulator (cuda_emu.h): the count
 * of its faults (launch limits broken, shuffle masks naming absent lanes),
 * each also reported on stderr where it happened.
 */
#ifndef PP_TESTS_EMU_H
#define PP_TESTS_EMU_H

#ifdef __cplusplus
extern "C" {
#endif

long pp_emu_faults(void);

#ifdef __cplusplus
}
#endif

#endif
