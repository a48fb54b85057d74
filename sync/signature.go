package sync

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
	"golang.org/x/crypto/ssh"
)

// ErrUnsigned is returned by SignaturePolicy.Verify when a commit
// carries no signature.
var ErrUnsigned = errors.New("commit is not signed")

// ErrUntrusted is returned (wrapped, naming the key) by
// SignaturePolicy.Verify when a commit is signed by a key the policy
// does not list, or its signature does not verify.
var ErrUntrusted = errors.New("signature not trusted")

// SignaturePolicy says which commits may be applied: those signed by a
// key it lists, as Flux and Argo CD verify them. SSH signatures (git's
// gpg.format=ssh) are checked against an allowed-signers file in
// ssh-keygen's format (ALLOWED SIGNERS in ssh-keygen(1): principals,
// options, key), in the "git" namespace, as `ssh-keygen -Y verify`
// checks them (PROTOCOL.sshsig); OpenPGP signatures against an armored
// keyring.
type SignaturePolicy struct {
	signers []allowedSigner
	keyring string // armored OpenPGP public keys, or ""
}

type allowedSigner struct {
	principals string
	key        ssh.PublicKey
	namespaces []string // nil: any
	line       int
}

// LoadSignaturePolicy reads an allowed-signers file and an armored
// OpenPGP keyring; either path may be "", not both. A line of the
// allowed-signers file with an option converge does not implement
// (cert-authority, valid-after, valid-before) is an error rather than a
// looser check.
func LoadSignaturePolicy(allowedSigners, keyring string) (*SignaturePolicy, error) {
	if allowedSigners == "" && keyring == "" {
		return nil, errors.New("load signature policy: neither an allowed-signers file nor a keyring")
	}
	p := &SignaturePolicy{}
	if allowedSigners != "" {
		b, err := os.ReadFile(allowedSigners)
		if err != nil {
			return nil, fmt.Errorf("read allowed signers: %w", err)
		}
		if p.signers, err = parseAllowedSigners(b); err != nil {
			return nil, fmt.Errorf("%s: %w", allowedSigners, err)
		}
	}
	if keyring != "" {
		b, err := os.ReadFile(keyring)
		if err != nil {
			return nil, fmt.Errorf("read keyring: %w", err)
		}
		if !bytes.Contains(b, []byte("-----BEGIN PGP PUBLIC KEY BLOCK-----")) {
			return nil, fmt.Errorf("%s: not an armored OpenPGP public keyring (gpg --export --armor)", keyring)
		}
		p.keyring = string(b)
	}
	return p, nil
}

// parseAllowedSigners reads ssh-keygen's allowed signers format: per
// line "principals [options] keytype base64-key [comment]", # comments.
func parseAllowedSigners(b []byte) ([]allowedSigner, error) {
	var out []allowedSigner
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		principals, rest := cutField(line)
		if rest == "" {
			return nil, fmt.Errorf("line %d: want principals and a key", n)
		}
		s := allowedSigner{principals: principals, line: n}
		// Options come before the key type unless the next field is a
		// key (ssh.ParseAuthorizedKey reads "[options] type key").
		key, _, opts, _, err := ssh.ParseAuthorizedKey([]byte(rest))
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		s.key = key
		for _, o := range opts {
			name, val, _ := strings.Cut(o, "=")
			switch strings.ToLower(name) {
			case "namespaces":
				for _, ns := range strings.Split(strings.Trim(val, `"`), ",") {
					s.namespaces = append(s.namespaces, strings.TrimSpace(ns))
				}
			default:
				return nil, fmt.Errorf("line %d: option %s is not supported (converge checks principals, namespaces and keys)", n, name)
			}
		}
		out = append(out, s)
	}
	return out, sc.Err()
}

// cutField splits s at its first run of blanks, a double-quoted first
// field kept whole.
func cutField(s string) (string, string) {
	if strings.HasPrefix(s, `"`) {
		if i := strings.Index(s[1:], `"`); i >= 0 {
			return s[1 : i+1], strings.TrimSpace(s[i+2:])
		}
	}
	i := strings.IndexAny(s, " \t")
	if i < 0 {
		return s, ""
	}
	return s[:i], strings.TrimSpace(s[i:])
}

// VerifyCommit checks the signature of the commit hash under p and
// returns who signed it ("SSH key SHA256:… of alice@example.com",
// "OpenPGP key 1234… of Alice <alice@example.com>"). It returns
// ErrUnsigned for a commit without a signature, and an error wrapping
// ErrUntrusted naming the key for one signed by a key p does not list
// or whose signature does not verify.
func (s *Source) VerifyCommit(hash string, p *SignaturePolicy) (string, error) {
	c, err := s.repo.CommitObject(plumbing.NewHash(hash))
	if err != nil {
		return "", fmt.Errorf("read commit %s: %w", hash, err)
	}
	return p.verifyCommit(c)
}

func (p *SignaturePolicy) verifyCommit(c *object.Commit) (string, error) {
	sig := strings.TrimSpace(c.PGPSignature)
	if sig == "" {
		return "", ErrUnsigned
	}
	switch {
	case strings.HasPrefix(sig, "-----BEGIN SSH SIGNATURE-----"):
		payload := plumbing.MemoryObject{}
		if err := c.EncodeWithoutSignature(&payload); err != nil {
			return "", fmt.Errorf("encode commit %s: %w", c.Hash, err)
		}
		r, err := payload.Reader()
		if err != nil {
			return "", fmt.Errorf("encode commit %s: %w", c.Hash, err)
		}
		var buf bytes.Buffer
		if _, err := buf.ReadFrom(r); err != nil {
			return "", fmt.Errorf("encode commit %s: %w", c.Hash, err)
		}
		return p.VerifySSH(buf.Bytes(), []byte(sig), "git")
	case strings.HasPrefix(sig, "-----BEGIN PGP SIGNATURE-----"):
		if p.keyring == "" {
			return "", fmt.Errorf("%w: an OpenPGP signature, and no keyring is trusted (--trusted-keys)", ErrUntrusted)
		}
		e, err := c.Verify(p.keyring)
		if err != nil {
			return "", fmt.Errorf("%w: OpenPGP: %v", ErrUntrusted, err)
		}
		who := ""
		for name := range e.Identities {
			if who == "" || name < who {
				who = name
			}
		}
		return fmt.Sprintf("OpenPGP key %X of %s", e.PrimaryKey.Fingerprint, who), nil
	}
	return "", fmt.Errorf("%w: a signature of a kind converge does not know (neither SSH nor OpenPGP)", ErrUntrusted)
}

// sshsigMagic opens an SSH signature and the data it signs
// (PROTOCOL.sshsig).
const sshsigMagic = "SSHSIG"

// VerifySSH checks armored, an SSH signature (`ssh-keygen -Y sign`) of
// message in namespace, against the allowed signers, as `ssh-keygen -Y
// verify` does, and returns who signed it.
func (p *SignaturePolicy) VerifySSH(message, armored []byte, namespace string) (string, error) {
	blob, err := unarmorSSH(armored)
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrUntrusted, err)
	}
	sig, err := parseSSHSig(blob)
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrUntrusted, err)
	}
	fp := ssh.FingerprintSHA256(sig.key)
	if sig.namespace != namespace {
		return "", fmt.Errorf("%w: SSH key %s signed in namespace %q, not %q", ErrUntrusted, fp, sig.namespace, namespace)
	}
	var h []byte
	switch sig.hash {
	case "sha256":
		s := sha256.Sum256(message)
		h = s[:]
	case "sha512":
		s := sha512.Sum512(message)
		h = s[:]
	default:
		return "", fmt.Errorf("%w: SSH signature hash %q (want sha256 or sha512)", ErrUntrusted, sig.hash)
	}
	signed := append([]byte(sshsigMagic), ssh.Marshal(struct {
		Namespace, Reserved, Hash string
		H                         []byte
	}{sig.namespace, sig.reserved, sig.hash, h})...)
	var who *allowedSigner
	for i := range p.signers {
		s := &p.signers[i]
		if bytes.Equal(s.key.Marshal(), sig.key.Marshal()) && nsAllowed(s.namespaces, namespace) {
			who = s
			break
		}
	}
	if who == nil {
		return "", fmt.Errorf("%w: signed by SSH key %s, which the allowed signers do not list for namespace %q", ErrUntrusted, fp, namespace)
	}
	if sig.sig.Format == ssh.KeyAlgoRSA {
		// sshsig never uses SHA-1 RSA signatures (ssh-keygen refuses them).
		return "", fmt.Errorf("%w: SSH key %s: an ssh-rsa (SHA-1) signature", ErrUntrusted, fp)
	}
	if err := sig.key.Verify(signed, sig.sig); err != nil {
		return "", fmt.Errorf("%w: SSH key %s: signature does not verify: %v", ErrUntrusted, fp, err)
	}
	return fmt.Sprintf("SSH key %s of %s", fp, who.principals), nil
}

func nsAllowed(allowed []string, ns string) bool {
	if allowed == nil {
		return true
	}
	for _, a := range allowed {
		if a == ns || a == "*" {
			return true
		}
	}
	return false
}

func unarmorSSH(armored []byte) ([]byte, error) {
	const begin, end = "-----BEGIN SSH SIGNATURE-----", "-----END SSH SIGNATURE-----"
	s := strings.TrimSpace(string(armored))
	if !strings.HasPrefix(s, begin) || !strings.HasSuffix(s, end) {
		return nil, errors.New("not an armored SSH signature")
	}
	body := strings.Join(strings.Fields(s[len(begin):len(s)-len(end)]), "")
	b, err := base64.StdEncoding.DecodeString(body)
	if err != nil {
		return nil, fmt.Errorf("SSH signature: %w", err)
	}
	return b, nil
}

type sshSig struct {
	key                       ssh.PublicKey
	namespace, reserved, hash string
	sig                       *ssh.Signature
}

// parseSSHSig decodes an SSH signature blob: the magic, version 1, the
// public key, namespace, reserved, hash algorithm and signature strings.
func parseSSHSig(b []byte) (*sshSig, error) {
	if len(b) < len(sshsigMagic)+4 || string(b[:len(sshsigMagic)]) != sshsigMagic {
		return nil, errors.New("SSH signature: no SSHSIG magic")
	}
	b = b[len(sshsigMagic):]
	if v := binary.BigEndian.Uint32(b); v != 1 {
		return nil, fmt.Errorf("SSH signature: version %d (want 1)", v)
	}
	var raw struct {
		Key, Namespace, Reserved, Hash, Sig []byte
		Rest                                []byte `ssh:"rest"`
	}
	if err := ssh.Unmarshal(b[4:], &raw); err != nil {
		return nil, fmt.Errorf("SSH signature: %w", err)
	}
	if len(raw.Rest) > 0 {
		return nil, errors.New("SSH signature: trailing data")
	}
	key, err := ssh.ParsePublicKey(raw.Key)
	if err != nil {
		return nil, fmt.Errorf("SSH signature: public key: %w", err)
	}
	sig := new(ssh.Signature)
	if err := ssh.Unmarshal(raw.Sig, sig); err != nil {
		return nil, fmt.Errorf("SSH signature: signature: %w", err)
	}
	return &sshSig{key: key, namespace: string(raw.Namespace), reserved: string(raw.Reserved), hash: string(raw.Hash), sig: sig}, nil
}
