package main

import (
	"os"
	"strings"

	"github.com/convergehq/converge/site"
)

// envUIToken names the variable that holds the site's login token for
// --ui-actions (unless --ui-token-file names a file holding it).
const envUIToken = "CONVERGE_UI_TOKEN"

// uiToken returns the login token for --ui-actions: the content of file
// (trimmed), else $CONVERGE_UI_TOKEN. A missing, empty or short token is a
// usage error: actions are never served unauthenticated.
func uiToken(file string) (string, error) {
	tok, from := os.Getenv(envUIToken), "$"+envUIToken
	if file != "" {
		data, err := os.ReadFile(file)
		if err != nil {
			return "", usageErr("--ui-token-file: %v", err)
		}
		tok, from = string(data), file
	}
	tok = strings.TrimSpace(tok)
	switch {
	case tok == "" && file == "":
		return "", usageErr("--ui-actions needs a login token: --ui-token-file FILE or $%s", envUIToken)
	case tok == "":
		return "", usageErr("%s: the login token is empty", from)
	case len(tok) < site.MinActionToken:
		return "", usageErr("%s: the login token has %d characters; it needs at least %d", from, len(tok), site.MinActionToken)
	}
	return tok, nil
}
