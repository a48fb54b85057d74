package main

import (
	"github.com/spf13/pflag"

	gitsync "github.com/convergehq/converge/sync"
)

// signatureOptions are sync's and serve's flags for applying only signed
// commits (gitsync.SignaturePolicy).
type signatureOptions struct {
	allowedSigners string // ssh-keygen's allowed signers file
	trustedKeys    string // an armored OpenPGP keyring
}

func (o *signatureOptions) addFlags(f *pflag.FlagSet) {
	f.StringVar(&o.allowedSigners, "allowed-signers", "", "apply only commits signed by a key of this SSH allowed-signers file (ssh-keygen -Y verify's format; git's gpg.ssh.allowedSignersFile), or by --trusted-keys; others are held, the last good revision stays applied")
	f.StringVar(&o.trustedKeys, "trusted-keys", "", "apply only commits signed by a key of this armored OpenPGP keyring (gpg --export --armor), or by --allowed-signers")
}

// policy loads the policy the flags name, or returns nil when they name
// none.
func (o *signatureOptions) policy() (*gitsync.SignaturePolicy, error) {
	if o.allowedSigners == "" && o.trustedKeys == "" {
		return nil, nil
	}
	return gitsync.LoadSignaturePolicy(o.allowedSigners, o.trustedKeys)
}
