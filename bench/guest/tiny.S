/* The benchmark guest: one ELF that both moat and QEMU boot through its PVH
 * entry (32-bit protected mode). It signals its first instruction and exits
 * at once, so a run measures process start -> first guest instruction ->
 * exit. Exits: QEMU's isa-debug-exit at 0xf4; moat's control device (status
 * 0) and an i8042 reset. Each VMM ignores the other's ports. */
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
    xorb %al, %al
    outb %al, $0xf4         /* QEMU: isa-debug-exit */
    movw $0xf40, %dx        /* moat: exit status 0 */
    outb %al, %dx
    movb $0xfe, %al
    outb %al, $0x64         /* moat: reset */
1:  hlt
    jmp 1b
