package codec

// appendCompactJSON appends src to dst without insignificant whitespace,
// as json.Compact does, and reports whether src is one valid JSON value.
// It is several times faster than json.Compact on the small specs and
// statuses of resources; FuzzCompactJSON checks it never accepts what
// encoding/json rejects and always writes what json.Compact writes.
func appendCompactJSON(dst, src []byte) ([]byte, bool) {
	c := compactor{src: src, out: dst}
	c.space()
	if !c.value(0) {
		return dst, false
	}
	c.space()
	if c.i != len(src) {
		return dst, false
	}
	return c.out, true
}

// maxCompactDepth bounds nesting; deeper values go to encoding/json.
const maxCompactDepth = 1000

type compactor struct {
	src []byte
	i   int
	out []byte
}

func (c *compactor) space() {
	for c.i < len(c.src) {
		switch c.src[c.i] {
		case ' ', '\t', '\n', '\r':
			c.i++
		default:
			return
		}
	}
}

func (c *compactor) value(depth int) bool {
	if c.i >= len(c.src) || depth > maxCompactDepth {
		return false
	}
	switch b := c.src[c.i]; {
	case b == '{':
		c.out = append(c.out, '{')
		c.i++
		c.space()
		if c.i < len(c.src) && c.src[c.i] == '}' {
			c.out = append(c.out, '}')
			c.i++
			return true
		}
		for {
			if c.i >= len(c.src) || c.src[c.i] != '"' || !c.str() {
				return false
			}
			c.space()
			if c.i >= len(c.src) || c.src[c.i] != ':' {
				return false
			}
			c.out = append(c.out, ':')
			c.i++
			c.space()
			if !c.value(depth + 1) {
				return false
			}
			if done, ok := c.next('}'); done || !ok {
				return ok
			}
		}
	case b == '[':
		c.out = append(c.out, '[')
		c.i++
		c.space()
		if c.i < len(c.src) && c.src[c.i] == ']' {
			c.out = append(c.out, ']')
			c.i++
			return true
		}
		for {
			if !c.value(depth + 1) {
				return false
			}
			if done, ok := c.next(']'); done || !ok {
				return ok
			}
		}
	case b == '"':
		return c.str()
	case b == '-' || (b >= '0' && b <= '9'):
		return c.number()
	case b == 't':
		return c.literal("true")
	case b == 'f':
		return c.literal("false")
	case b == 'n':
		return c.literal("null")
	}
	return false
}

func (c *compactor) literal(lit string) bool {
	if len(c.src)-c.i < len(lit) || string(c.src[c.i:c.i+len(lit)]) != lit {
		return false
	}
	c.out = append(c.out, lit...)
	c.i += len(lit)
	return true
}

// str copies a string verbatim, checking escapes and control characters
// (like encoding/json, it does not check UTF-8).
func (c *compactor) str() bool {
	start := c.i
	c.i++ // opening quote
	for c.i < len(c.src) {
		switch b := c.src[c.i]; {
		case b == '"':
			c.i++
			c.out = append(c.out, c.src[start:c.i]...)
			return true
		case b == '\\':
			if c.i+1 >= len(c.src) {
				return false
			}
			switch c.src[c.i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				c.i += 2
			case 'u':
				if c.i+6 > len(c.src) {
					return false
				}
				for _, h := range c.src[c.i+2 : c.i+6] {
					if !(h >= '0' && h <= '9' || h >= 'a' && h <= 'f' || h >= 'A' && h <= 'F') {
						return false
					}
				}
				c.i += 6
			default:
				return false
			}
		case b < 0x20:
			return false
		default:
			c.i++
		}
	}
	return false
}

// number copies a number: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (c *compactor) number() bool {
	start := c.i
	digits := func() int {
		n := 0
		for c.i < len(c.src) && c.src[c.i] >= '0' && c.src[c.i] <= '9' {
			c.i++
			n++
		}
		return n
	}
	if c.src[c.i] == '-' {
		c.i++
	}
	if c.i >= len(c.src) {
		return false
	}
	if c.src[c.i] == '0' {
		c.i++
	} else if digits() == 0 {
		return false
	}
	if c.i < len(c.src) && c.src[c.i] == '.' {
		c.i++
		if digits() == 0 {
			return false
		}
	}
	if c.i < len(c.src) && (c.src[c.i] == 'e' || c.src[c.i] == 'E') {
		c.i++
		if c.i < len(c.src) && (c.src[c.i] == '+' || c.src[c.i] == '-') {
			c.i++
		}
		if digits() == 0 {
			return false
		}
	}
	c.out = append(c.out, c.src[start:c.i]...)
	return true
}

// next reads what follows a member or element: a comma (more to come:
// done false) or the closing byte (done true). ok is false for anything
// else.
func (c *compactor) next(closing byte) (done, ok bool) {
	c.space()
	if c.i >= len(c.src) {
		return false, false
	}
	switch c.src[c.i] {
	case ',':
		c.out = append(c.out, ',')
		c.i++
		c.space()
		return false, true
	case closing:
		c.out = append(c.out, closing)
		c.i++
		return true, true
	}
	return false, false
}
