package converge

import "strconv"

// Plural renders a count with its noun for people: "1 error", "0
// errors", "3 kinds". Verdicts, statuses and summaries all use it, so a
// description never says "1 errors".
func Plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return strconv.Itoa(n) + " " + noun + "s"
}
