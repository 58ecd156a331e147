package messages

import (
	"slices"
	"testing"
)

// The framers must find, over any chunking, exactly what the whole-stream oracles find: the same
// message starts, the same violation at the same offset, the same counts and close code.

func FuzzGRPCAgreesWithTheOracleOverAnyChunking(f *testing.F) {
	f.Add(cat(grpcMsg(0, "hello"), grpcMsg(1, "")), uint64(1), uint32(0))
	f.Add(cat(grpcMsg(0, "abc"), []byte{3}), uint64(2), uint32(0))
	f.Add([]byte{0, 0xff, 0xff, 0xff, 0xff, 1, 2}, uint64(3), uint32(1<<20))
	f.Add(cat(grpcMsg(1, "12345678"), grpcMsg(0, "x")), uint64(4), uint32(8))
	f.Fuzz(func(t *testing.T, data []byte, seed uint64, maxSize uint32) {
		want := oracleGRPC(data, maxSize)
		got := feedChunks(&GRPC{MaxMessageSize: maxSize}, data, randomCuts(seed))
		if !equalParse(got, want) {
			t.Fatalf("chunked %+v, oracle %+v", got, want)
		}
	})
}

func FuzzWebSocketAgreesWithTheOracleOverAnyChunking(f *testing.F) {
	f.Add(cat(wsFrame(0x01, key, "frag"), wsFrame(0x89, key, "p"), wsFrame(0x80, key, "ment"), wsFrame(0x88, key, "\x03\xe8")), uint64(1), uint8(1), uint64(0))
	f.Add(cat(wsFrame(0x82, nil, string(make([]byte, 200))), []byte{0x81, 127, 0, 0, 0, 0, 0, 0, 0, 2, 'a', 'b'}), uint64(2), uint8(0), uint64(0))
	f.Add(cat(wsFrame(0xC1, nil, "z"), wsFrame(0x80|0x40, nil, "y")), uint64(3), uint8(2), uint64(0))
	f.Add(cat(wsFrame(0x01, nil, "abc"), wsFrame(0x80, nil, "def")), uint64(4), uint8(0), uint64(5))
	f.Add([]byte("HTTP/1.1 101 Switching Protocols\r\n"), uint64(5), uint8(0), uint64(0))
	f.Fuzz(func(t *testing.T, data []byte, seed uint64, flags uint8, maxSize uint64) {
		cfg := WebSocket{FromClient: flags&1 != 0, Deflate: flags&2 != 0, MaxMessageSize: maxSize}
		want := oracleWS(data, cfg)
		w := cfg
		got := feedChunks(&w, data, randomCuts(seed))
		if !equalParse(got, want) {
			t.Fatalf("chunked %+v, oracle %+v", got, want)
		}
	})
}

func equalParse(a, b parse) bool {
	return slices.Equal(a.starts, b.starts) && a.err == b.err && a.offset == b.offset && a.boundary == b.boundary &&
		a.frames == b.frames && a.controls == b.controls && a.closed == b.closed && a.closeCode == b.closeCode
}
