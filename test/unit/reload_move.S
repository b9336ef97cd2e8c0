/* reload_move.S: a second "plugin" for test_prof_unwind's reload test, built
 * twice (V=1, V=2).  In V=2 the function g before `entry` is 16 bytes
 * longer and so is its FDE, so entry's code, its CIE (its own: it has a
 * personality) and its FDE all move by 16 bytes: the FDE's bytes stay the
 * same (its pc_begin and CIE pointer are relative), but its call returns
 * to the same address with another CFA (rsp+32 in V=1, rsp+16 in V=2). */
	.text
	.p2align 4
	.globl g
	.type g, @function
g:
	.cfi_startproc
	ret
#if V == 2
	.cfi_same_value %r12
	.cfi_same_value %r12
	.cfi_same_value %r12
	.cfi_same_value %r12
	.cfi_same_value %r12
	.cfi_same_value %r12
	.cfi_same_value %r12
	.cfi_same_value %r12
	.cfi_same_value %r12
	.skip 16, 0x90
#endif
	.cfi_endproc
	.size g, .-g

	.p2align 4
	.globl plug_call
	.type plug_call, @function
plug_call: /* plug_call(fn) calls fn() */
	.cfi_startproc
	.cfi_personality 0x9b, DW.ref.pers
	pushq %rbp
	.cfi_def_cfa_offset 16
	movq %rdi, %rax
#if V == 1
	.skip plug_call + 0x2a - ., 0x90
	subq $16, %rsp
	.cfi_def_cfa_offset 32
	call *%rax
	addq $16, %rsp
	.cfi_def_cfa_offset 16
	popq %rbp
	.cfi_def_cfa_offset 8
	ret
#else
	.skip plug_call + 0x1e - ., 0x90
	call *%rax
	popq %rbp
	ret
	.skip plug_call + 0x2e - ., 0x90
	.cfi_def_cfa_offset 32
	.skip plug_call + 0x34 - ., 0x90
	.cfi_def_cfa_offset 16
	nop
	.cfi_def_cfa_offset 8
	ret
#endif
	.cfi_endproc
	.size plug_call, .-plug_call
pers:	ret
	.hidden DW.ref.pers
	.weak DW.ref.pers
	.section .data.rel.local.DW.ref.pers, "awG", @progbits, DW.ref.pers, comdat
	.align 8
	.type DW.ref.pers, @object
	.size DW.ref.pers, 8
DW.ref.pers:
	.quad pers
	.section .note.GNU-stack, "", @progbits
