package site

// indentJSON appends src indented as json.Indent(dst, src, "", "  ")
// writes it, and reports whether src is one valid JSON value (false:
// dst is returned as it was, and the caller asks encoding/json). It is
// json.Indent without its byte-at-a-time state machine: at a million
// resources, indenting specs and statuses for their pages was ~3% of a
// site build. FuzzIndentJSON checks it against json.Indent.
func indentJSON(dst, src []byte) ([]byte, bool) {
	in := indenter{src: src, out: dst}
	in.space()
	if !in.value(0) {
		return dst, false
	}
	end := in.i
	in.space()
	if in.i != len(src) {
		return dst, false
	}
	return append(in.out, src[end:]...), true // json.Indent keeps trailing space
}

// maxIndentDepth bounds nesting; deeper values go to encoding/json.
const maxIndentDepth = 1000

type indenter struct {
	src []byte
	i   int
	out []byte
}

func (in *indenter) space() {
	for in.i < len(in.src) {
		switch in.src[in.i] {
		case ' ', '\t', '\n', '\r':
			in.i++
		default:
			return
		}
	}
}

func (in *indenter) newline(depth int) {
	in.out = append(in.out, '\n')
	for range depth {
		in.out = append(in.out, ' ', ' ')
	}
}

func (in *indenter) value(depth int) bool {
	if in.i >= len(in.src) || depth > maxIndentDepth {
		return false
	}
	switch c := in.src[in.i]; {
	case c == '{' || c == '[':
		closing := byte('}')
		if c == '[' {
			closing = ']'
		}
		in.out = append(in.out, c)
		in.i++
		in.space()
		if in.i < len(in.src) && in.src[in.i] == closing {
			in.out = append(in.out, closing)
			in.i++
			return true
		}
		for {
			in.newline(depth + 1)
			if c == '{' {
				if in.i >= len(in.src) || in.src[in.i] != '"' || !in.str() {
					return false
				}
				in.space()
				if in.i >= len(in.src) || in.src[in.i] != ':' {
					return false
				}
				in.out = append(in.out, ':', ' ')
				in.i++
				in.space()
			}
			if !in.value(depth + 1) {
				return false
			}
			in.space()
			if in.i >= len(in.src) {
				return false
			}
			switch in.src[in.i] {
			case ',':
				in.out = append(in.out, ',')
				in.i++
				in.space()
				continue
			case closing:
				in.newline(depth)
				in.out = append(in.out, closing)
				in.i++
				return true
			}
			return false
		}
	case c == '"':
		return in.str()
	case c == '-' || c >= '0' && c <= '9':
		return in.number()
	case c == 't':
		return in.literal("true")
	case c == 'f':
		return in.literal("false")
	case c == 'n':
		return in.literal("null")
	}
	return false
}

func (in *indenter) literal(lit string) bool {
	if len(in.src)-in.i < len(lit) || string(in.src[in.i:in.i+len(lit)]) != lit {
		return false
	}
	in.out = append(in.out, lit...)
	in.i += len(lit)
	return true
}

// str copies a string verbatim, checking its escapes and that it holds no
// control character (like encoding/json, it does not check UTF-8).
func (in *indenter) str() bool {
	start := in.i
	in.i++ // the opening quote
	for in.i < len(in.src) {
		c := in.src[in.i]
		if c >= 0x20 && c != '"' && c != '\\' {
			in.i++
			continue
		}
		switch c {
		case '"':
			in.i++
			in.out = append(in.out, in.src[start:in.i]...)
			return true
		case '\\':
			if in.i+1 >= len(in.src) {
				return false
			}
			switch in.src[in.i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				in.i += 2
			case 'u':
				if in.i+6 > len(in.src) {
					return false
				}
				for _, h := range in.src[in.i+2 : in.i+6] {
					if !(h >= '0' && h <= '9' || h >= 'a' && h <= 'f' || h >= 'A' && h <= 'F') {
						return false
					}
				}
				in.i += 6
			default:
				return false
			}
		default: // a control character
			return false
		}
	}
	return false
}

// number copies a number: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (in *indenter) number() bool {
	start := in.i
	digits := func() int {
		n := 0
		for in.i < len(in.src) && in.src[in.i] >= '0' && in.src[in.i] <= '9' {
			in.i++
			n++
		}
		return n
	}
	if in.src[in.i] == '-' {
		in.i++
	}
	if in.i >= len(in.src) {
		return false
	}
	if in.src[in.i] == '0' {
		in.i++
	} else if digits() == 0 {
		return false
	}
	if in.i < len(in.src) && in.src[in.i] == '.' {
		in.i++
		if digits() == 0 {
			return false
		}
	}
	if in.i < len(in.src) && (in.src[in.i] == 'e' || in.src[in.i] == 'E') {
		in.i++
		if in.i < len(in.src) && (in.src[in.i] == '+' || in.src[in.i] == '-') {
			in.i++
		}
		if digits() == 0 {
			return false
		}
	}
	in.out = append(in.out, in.src[start:in.i]...)
	return true
}
