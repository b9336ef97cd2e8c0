/* reload_plug.S: a "plugin" for test_prof_unwind's reload test, built
 * twice (FRAME=8 and FRAME=120) into two libraries of the same layout, and
 * once more with MANY_FDES for the unload tests:
 * plug_call(fn) calls fn with a frame of FRAME bytes, so the two builds
 * differ only in the CFA offset of their one FDE. */
	.text
	.globl plug_call
	.type plug_call, @function
plug_call:
	.cfi_startproc
	sub $FRAME, %rsp
	.cfi_def_cfa_offset (FRAME + 8)
	call *%rdi
	add $FRAME, %rsp
	.cfi_def_cfa_offset 8
	ret
	.cfi_endproc
	.size plug_call, .-plug_call
#ifdef MANY_FDES
	/* the unload tests' plugin (plug_many.so): 600 one-instruction
	 * functions with their own FDEs make .eh_frame several pages long, a
	 * range the unwinder could give back */
	.rept 600
	.cfi_startproc
	ret
	.cfi_endproc
	.endr
#endif
	.section .note.GNU-stack, "", @progbits
