/* many_fde_plug.S: a "plugin" for test_stacktrace's unload test: plug_call(fn)
 * calls fn, and 600 one-instruction functions with their own FDEs make its
 * .eh_frame several pages long (a range the unwinder could give back). */
	.text
	.globl plug_call
	.type plug_call, @function
plug_call:
	.cfi_startproc
	sub $8, %rsp
	.cfi_def_cfa_offset 16
	call *%rdi
	add $8, %rsp
	.cfi_def_cfa_offset 8
	ret
	.cfi_endproc
	.size plug_call, .-plug_call
	.rept 600
	.cfi_startproc
	ret
	.cfi_endproc
	.endr
	.section .note.GNU-stack, "", @progbits
