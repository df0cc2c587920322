/* Entry of every test guest; all vCPUs arrive here at once (rt.h). */
    .section .text.entry, "ax"
    .globl _start
    .type _start, @function
_start:
    cli
    cld
    /* Record the entry RSP and RFLAGS (for the entry guest) if the index fits. */
    cmp $64, %rdi
    jae 1f
    lea rt_entry_rsp(%rip), %rax
    mov %rsp, (%rax,%rdi,8)
    pushfq
    pop %rcx
    lea rt_entry_rflags(%rip), %rax
    mov %rcx, (%rax,%rdi,8)
1:
    and $-16, %rsp
    xor %ebp, %ebp
    /* guest_main(cpu = rdi, ncpus = rsi, mem = rdx): arguments already in place. */
    call guest_main
    mov $0x0F40, %dx
    outb %al, %dx
    mov $0xFE, %al
    outb %al, $0x64
2:
    cli
    hlt
    jmp 2b
    .size _start, . - _start

    .section .note.GNU-stack, "", @progbits
