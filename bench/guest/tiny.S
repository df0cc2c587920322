/* The benchmark guest: one ELF that both moat and QEMU boot through its PVH
 * entry (32-bit protected mode). It signals its first instruction and exits
 * at once, so a run measures process start -> first guest instruction ->
 * exit. */
    .include "pvh.inc"
    pvh_note entry32

    .text
    .code32
    .globl entry32
entry32:
    moat_first_insn
    exit_both
