package callgrind

// clientRequest runs valgrind's client request args[0] with arguments args[1:] (callgrind_amd64.s);
// it returns what valgrind answered, 0 outside valgrind.
//
//go:noescape
func clientRequest(args *[6]uint64) uint64
