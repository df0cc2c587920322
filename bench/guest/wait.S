/* The snapshot benchmark guest: one ELF that both moat and QEMU boot
 * through its PVH entry (32-bit protected mode). It prints "W" on the
 * UART (0x3f8), then polls the UART's line status until a byte arrives and
 * exits (QEMU's isa-debug-exit at 0xf4; moat's control device status 0 and
 * an i8042 reset). A VMM snapshots it while it waits; the restored guest
 * is fed one byte and exits at once, so a restore run measures process
 * start -> state loaded -> guest running -> exit. */
    .section .note.Xen, "a"
    .p2align 2
    .long 4                 /* namesz */
    .long 4                 /* descsz */
    .long 18                /* XEN_ELFNOTE_PHYS32_ENTRY */
    .asciz "Xen"
    .long entry32

    .text
    .code32
    .globl entry32
entry32:
    movw $0xf41, %dx        /* moat: event 1, "first instruction" */
    movb $1, %al
    outb %al, %dx
    movw $0x3f8, %dx
    movb $'W', %al
    outb %al, %dx
    movb $'\n', %al
    outb %al, %dx
    movw $0x3fd, %dx        /* line status: bit 0 = data ready */
1:  inb %dx, %al
    testb $1, %al
    jz 1b
    xorb %al, %al
    outb %al, $0xf4         /* QEMU: isa-debug-exit */
    movw $0xf40, %dx        /* moat: exit status 0 */
    outb %al, %dx
    movb $0xfe, %al
    outb %al, $0x64         /* moat: reset */
2:  hlt
    jmp 2b
