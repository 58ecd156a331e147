package rules

// AppendNormalizedPath appends to dst the normalized form of the :path p that path matches and the
// path key part use, and returns the extended buffer. It allocates only when dst must grow, so a
// caller that keeps its buffer from request to request normalizes without allocating.
//
// The normalization follows RFC 3986 section 6.2.2 and adds the two rules a proxy needs:
//   - the query ('?' onwards) and a fragment ('#' onwards) are dropped;
//   - a percent-encoded unreserved character (ALPHA, DIGIT, '-', '.', '_', '~') is decoded, and the
//     hex digits of every other percent-encoding are upper-cased: "/%61pi" is "/api", "%2f" is
//     "%2F" and stays encoded (an encoded slash is data, not a separator);
//   - a segment's parameters (a raw ';' to the end of the segment, RFC 3986 section 3.3) are
//     dropped, as servlet containers do before they route: "/api;jsessionid=1/users" is
//     "/api/users", "/..;/admin" is "/admin" (an encoded "%3B" is data and stays);
//   - empty segments are dropped, so runs of slashes merge: "//api" is "/api";
//   - dot segments are resolved after decoding: "/./api", "/x/../api" and "/%2e%2e/api" are all
//     "/api", and ".." never climbs above the root;
//   - the trailing dots of a segment that is not made of dots only are dropped, as IIS and
//     Windows do: "/login." and "/login%2e" are "/login", "/a.../b" is "/a/b";
//   - the result starts with '/' ("" and "*" become "/" and "/*"); a trailing slash is kept, and a
//     path whose last segment was "." or ".." ends with one ("/a/b/.." is "/a/").
//
// Case is kept: ignore_case on a path match compares case-insensitively instead. The result is
// idempotent (normalizing it again changes nothing) and never longer than p, except by the '/'
// added in front of a p that lacks it.
func AppendNormalizedPath(dst []byte, p string) []byte {
	for i := 0; i < len(p); i++ {
		if p[i] == '?' || p[i] == '#' {
			p = p[:i]
			break
		}
	}
	root := len(dst)
	dst = append(dst, '/')
	segStart := len(dst) // where the segment being written begins
	params := false      // past a raw ';' in this segment: its parameters are dropped
	for i := 0; i <= len(p); {
		if i == len(p) || p[i] == '/' {
			dst = endSegment(dst, root, segStart, i == len(p))
			segStart, params = len(dst), false
			i++
			continue
		}
		if params || p[i] == ';' {
			params = true
			i++
			continue
		}
		c, n := pathByte(p, i)
		if n == 3 && isHex(c) && endsInPartialEscape(dst) {
			// Decoding would complete a raw '%' before it into a new escape, which a second
			// normalization would decode: keep this one encoded.
			n = 1
			c = '%'
		}
		dst = appendPathByte(dst, p, i, c, n)
		i += n
		if n == 1 && c == '%' && i+1 < len(p) && isHex(p[i]) && isHex(p[i+1]) {
			i += 2 // a kept escape: appendPathByte wrote its three bytes
		}
	}
	return dst
}

// endSegment finishes the segment dst[segStart:] (last tells whether it ends the path): an empty
// segment is dropped, "." is dropped, ".." also drops the previous segment, and any other segment
// is kept followed by a '/' unless it is the last. It returns dst with at least the root '/' at
// dst[root].
func endSegment(dst []byte, root, segStart int, last bool) []byte {
	seg := dst[segStart:]
	switch {
	case len(seg) == 0:
		return dst
	case len(seg) == 1 && seg[0] == '.':
		return dst[:segStart]
	case len(seg) == 2 && seg[0] == '.' && seg[1] == '.':
		dst = dst[:segStart]
		if segStart-1 > root { // drop "name/" before the segment
			j := segStart - 2
			for j > root && dst[j] != '/' {
				j--
			}
			dst = dst[:j+1]
		}
		return dst
	}
	dst = trimTrailingDots(dst, segStart)
	if !last {
		dst = append(dst, '/')
	}
	return dst
}

// trimTrailingDots drops the trailing dots of the segment dst[segStart:] unless it is made of dots
// only ("login." and "login%2e." are "login", "..." stays), as IIS and Windows file systems
// drop them before they look the name up.
func trimTrailingDots(dst []byte, segStart int) []byte {
	end := len(dst)
	for end > segStart && dst[end-1] == '.' {
		end--
	}
	if end == segStart {
		return dst
	}
	return dst[:end]
}

// pathByte reads the byte at p[i]: a decoded unreserved character when p[i:] starts with its
// percent-encoding (n is then 3), else the byte itself (n is 1).
func pathByte(p string, i int) (c byte, n int) {
	c = p[i]
	if c == '%' && i+2 < len(p) && isHex(p[i+1]) && isHex(p[i+2]) {
		if d := unhex(p[i+1])<<4 | unhex(p[i+2]); isUnreserved(d) {
			return d, 3
		}
	}
	return c, 1
}

// endsInPartialEscape reports whether dst ends in a '%' or a '%' and one hex digit.
func endsInPartialEscape(dst []byte) bool {
	n := len(dst)
	return n >= 1 && dst[n-1] == '%' || n >= 2 && dst[n-2] == '%' && isHex(dst[n-1])
}

// appendPathByte appends one read of pathByte: the decoded byte, or a kept percent-encoding with
// upper-case hex digits, or the raw byte.
func appendPathByte(dst []byte, p string, i int, c byte, n int) []byte {
	if n == 1 && c == '%' && i+2 < len(p) && isHex(p[i+1]) && isHex(p[i+2]) {
		return append(dst, '%', upperHex(p[i+1]), upperHex(p[i+2]))
	}
	return append(dst, c)
}

func upperHex(c byte) byte {
	if 'a' <= c && c <= 'f' {
		return c - 'a' + 'A'
	}
	return c
}

// isUnreserved reports whether c is an RFC 3986 unreserved character.
func isUnreserved(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
		c == '-' || c == '.' || c == '_' || c == '~'
}
