package site

import "github.com/convergehq/converge/proto/rawjson"

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

// maxIndentDepth bounds nesting: converge's one limit (rawjson.MaxDepth,
// encoding/json's), past which the text is not valid JSON.
const maxIndentDepth = rawjson.MaxDepth

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
	if in.i >= len(in.src) {
		return false
	}
	switch c := in.src[in.i]; {
	case c == '{' || c == '[':
		if depth >= maxIndentDepth {
			return false
		}
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

// str copies a string verbatim (rawjson.String: its escapes checked, no
// control character; like encoding/json, UTF-8 is not checked).
func (in *indenter) str() bool {
	end, _, err := rawjson.String(in.src, in.i)
	return in.copyTo(end, err)
}

// number copies a number (rawjson.Number).
func (in *indenter) number() bool {
	end, _, err := rawjson.Number(in.src, in.i)
	return in.copyTo(end, err)
}

// copyTo copies the token that ends at end, unless err.
func (in *indenter) copyTo(end int, err error) bool {
	if err != nil {
		return false
	}
	in.out = append(in.out, in.src[in.i:end]...)
	in.i = end
	return true
}
