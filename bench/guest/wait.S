/* The snapshot benchmark guest: one ELF that both moat and QEMU boot
 * through its PVH entry (32-bit protected mode). It prints "W" on the
 * UART (0x3f8), then polls the UART's line status until a byte arrives and
 * exits. A VMM snapshots it while it waits; the restored guest is fed one
 * byte and exits at once, so a restore run measures process start -> state
 * loaded -> guest running -> exit. */
    .include "pvh.inc"
    pvh_note entry32

    .text
    .code32
    .globl entry32
entry32:
    moat_first_insn
    movw $0x3f8, %dx
    movb $'W', %al
    outb %al, %dx
    movb $'\n', %al
    outb %al, %dx
    movw $0x3fd, %dx        /* line status: bit 0 = data ready */
1:  inb %dx, %al
    testb $1, %al
    jz 1b
    exit_both
