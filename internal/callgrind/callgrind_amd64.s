#include "textflag.h"

// func clientRequest(args *[6]uint64) uint64
// valgrind.h's VALGRIND_DO_CLIENT_REQUEST_EXPR for amd64: RAX points at the request and its
// arguments, RDX holds the default result and receives valgrind's answer.
TEXT ·clientRequest(SB), NOSPLIT, $0-16
	MOVQ args+0(FP), AX
	MOVQ $0, DX
	ROLQ $3, DI
	ROLQ $13, DI
	ROLQ $61, DI
	ROLQ $51, DI
	XCHGQ BX, BX
	MOVQ DX, ret+8(FP)
	RET
