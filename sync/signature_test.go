package sync

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// sshKey makes an SSH key pair of type typ in dir with ssh-keygen and
// returns the private key's path and the public key line.
func sshKey(t *testing.T, dir, name, typ string) (string, string) {
	t.Helper()
	if _, err := exec.LookPath("ssh-keygen"); err != nil {
		t.Skip("no ssh-keygen (Debian: openssh-client)")
	}
	key := filepath.Join(dir, name)
	args := []string{"-q", "-t", typ, "-N", "", "-C", name, "-f", key}
	if typ == "rsa" {
		args = append(args, "-b", "2048")
	}
	run(t, dir, "ssh-keygen", args...)
	pub, err := os.ReadFile(key + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	return key, strings.TrimSpace(string(pub))
}

func run(t *testing.T, dir, name string, args ...string) string {
	t.Helper()
	out, err := runErr(dir, name, args...)
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return out
}

func runErr(dir, name string, args ...string) (string, error) {
	c := exec.Command(name, args...)
	c.Dir = dir
	c.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1",
		"GIT_AUTHOR_NAME=alice", "GIT_AUTHOR_EMAIL=alice@example.com", "GIT_COMMITTER_NAME=alice", "GIT_COMMITTER_EMAIL=alice@example.com")
	out, err := c.CombinedOutput()
	return string(out), err
}

// TestVerifySSHAgainstSSHKeygen signs messages with `ssh-keygen -Y sign`
// and checks that VerifySSH answers as `ssh-keygen -Y verify` does: every
// key type, a tampered message, another namespace, a key not listed, a
// key listed for another namespace.
func TestVerifySSHAgainstSSHKeygen(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("HOME", dir)
	type key struct{ path, pub string }
	keys := map[string]key{}
	for _, typ := range []string{"ed25519", "ecdsa", "rsa"} {
		p, pub := sshKey(t, dir, "id_"+typ, typ)
		keys[typ] = key{p, pub}
	}
	stranger, _ := sshKey(t, dir, "id_stranger", "ed25519")
	signers := filepath.Join(dir, "allowed_signers")
	lines := "# the team\n" +
		"alice@example.com " + keys["ed25519"].pub + "\n" +
		`bob@example.com,carol@example.com namespaces="git,file" ` + keys["ecdsa"].pub + "\n" +
		`dave@example.com namespaces="file" ` + keys["rsa"].pub + "\n"
	if err := os.WriteFile(signers, []byte(lines), 0o600); err != nil {
		t.Fatal(err)
	}
	p, err := LoadSignaturePolicy(signers, "")
	if err != nil {
		t.Fatal(err)
	}
	msg := filepath.Join(dir, "msg")
	if err := os.WriteFile(msg, []byte("tree 1234\nauthor alice\n\nthe commit\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	sign := func(keyPath, ns string) []byte {
		run(t, dir, "ssh-keygen", "-q", "-Y", "sign", "-n", ns, "-f", keyPath, msg)
		b, err := os.ReadFile(msg + ".sig")
		if err != nil {
			t.Fatal(err)
		}
		os.Remove(msg + ".sig")
		return b
	}
	tests := []struct {
		name      string
		key       string
		signNS    string
		checkNS   string
		tamper    bool
		principal string // for ssh-keygen -Y verify -I
		wantWho   string // substring; "" means refused
	}{
		{"ed25519", keys["ed25519"].path, "git", "git", false, "alice@example.com", "of alice@example.com"},
		{"ecdsa, listed for git and file", keys["ecdsa"].path, "git", "git", false, "bob@example.com", "of bob@example.com,carol@example.com"},
		{"rsa, listed for file only", keys["rsa"].path, "git", "git", false, "dave@example.com", ""},
		{"rsa in its namespace", keys["rsa"].path, "file", "file", false, "dave@example.com", "of dave@example.com"},
		{"a tampered message", keys["ed25519"].path, "git", "git", true, "alice@example.com", ""},
		{"signed in another namespace", keys["ed25519"].path, "file", "git", false, "alice@example.com", ""},
		{"a key not listed", stranger, "git", "git", false, "alice@example.com", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sig := sign(tt.key, tt.signNS)
			body, _ := os.ReadFile(msg)
			if tt.tamper {
				body = append(body, '!')
			}
			who, err := p.VerifySSH(body, sig, tt.checkNS)
			// The oracle: ssh-keygen on the same bytes.
			sigFile, bodyFile := filepath.Join(dir, "check.sig"), filepath.Join(dir, "check.body")
			os.WriteFile(sigFile, sig, 0o600)
			os.WriteFile(bodyFile, body, 0o600)
			c := exec.Command("ssh-keygen", "-Y", "verify", "-f", signers, "-I", tt.principal, "-n", tt.checkNS, "-s", sigFile)
			c.Stdin, _ = os.Open(bodyFile)
			out, kerr := c.CombinedOutput()
			if (kerr == nil) != (err == nil) {
				t.Errorf("VerifySSH: %v; ssh-keygen -Y verify: %v %s", err, kerr, out)
			}
			if tt.wantWho == "" {
				if !errors.Is(err, ErrUntrusted) {
					t.Errorf("VerifySSH = %q, %v: want ErrUntrusted", who, err)
				}
				return
			}
			if err != nil || !strings.Contains(who, tt.wantWho) || !strings.HasPrefix(who, "SSH key SHA256:") {
				t.Errorf("VerifySSH = %q, %v: want %q", who, err, tt.wantWho)
			}
		})
	}
}

func TestLoadSignaturePolicyRefusesWhatItCannotCheck(t *testing.T) {
	dir := t.TempDir()
	_, pub := sshKey(t, dir, "id", "ed25519")
	for _, line := range []string{
		"alice@example.com cert-authority " + pub,
		`alice@example.com valid-after="20240101" ` + pub,
		"alice@example.com",
		"alice@example.com ssh-ed25519 not-base64!",
	} {
		f := filepath.Join(dir, "signers")
		os.WriteFile(f, []byte(line+"\n"), 0o600)
		if _, err := LoadSignaturePolicy(f, ""); err == nil {
			t.Errorf("LoadSignaturePolicy accepts %q", line)
		}
	}
}

// TestVerifyCommit signs commits with the git CLI (gpg.format=ssh and
// openpgp) and checks VerifyCommit against git verify-commit.
func TestVerifyCommit(t *testing.T) {
	dir := t.TempDir()
	// git and gpg read their settings and keys here, not the user's.
	t.Setenv("HOME", dir)
	t.Setenv("GNUPGHOME", filepath.Join(dir, "gnupg"))
	key, pub := sshKey(t, dir, "id_ed25519", "ed25519")
	other, _ := sshKey(t, dir, "id_other", "ed25519")
	signers := filepath.Join(dir, "allowed_signers")
	os.WriteFile(signers, []byte("alice@example.com "+pub+"\n"), 0o600)
	repo := filepath.Join(dir, "repo")
	run(t, dir, "git", "init", "-q", "-b", "main", repo)
	commit := func(args ...string) string {
		os.WriteFile(filepath.Join(repo, "f"), []byte(strings.Join(args, " ")+"\n"), 0o600)
		run(t, repo, "git", "add", "f")
		run(t, repo, "git", append([]string{"-c", "gpg.ssh.allowedSignersFile=" + signers}, append(args, "commit", "-q", "-m", "c")...)...)
		return strings.TrimSpace(run(t, repo, "git", "rev-parse", "HEAD"))
	}
	unsigned := commit()
	good := commit("-c", "gpg.format=ssh", "-c", "user.signingkey="+key, "-c", "commit.gpgsign=true")
	stranger := commit("-c", "gpg.format=ssh", "-c", "user.signingkey="+other, "-c", "commit.gpgsign=true")

	var pgp, pgpKeyring string
	if _, err := exec.LookPath("gpg"); err == nil {
		os.MkdirAll(filepath.Join(dir, "gnupg"), 0o700)
		// The agent gpg starts lives as long as its home: stop it.
		t.Cleanup(func() { runErr(dir, "gpgconf", "--kill", "gpg-agent") })
		run(t, dir, "gpg", "--batch", "--pinentry-mode", "loopback", "--passphrase", "", "--quick-gen-key", "Alice <alice@example.com>", "ed25519", "sign", "never")
		pgpKeyring = filepath.Join(dir, "keyring.asc")
		os.WriteFile(pgpKeyring, []byte(run(t, dir, "gpg", "--armor", "--export", "alice@example.com")), 0o600)
		pgp = commit("-c", "gpg.format=openpgp", "-c", "user.signingkey=alice@example.com", "-c", "commit.gpgsign=true")
	}

	src, err := OpenLocal(repo, "main")
	if err != nil {
		t.Fatal(err)
	}
	sshOnly, err := LoadSignaturePolicy(signers, "")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		hash    string
		policy  *SignaturePolicy
		wantWho string
		wantErr error
	}{
		{"an unsigned commit", unsigned, sshOnly, "", ErrUnsigned},
		{"an SSH-signed commit", good, sshOnly, "of alice@example.com", nil},
		{"signed by a key not listed", stranger, sshOnly, "", ErrUntrusted},
	}
	if pgp != "" {
		both, err := LoadSignaturePolicy(signers, pgpKeyring)
		if err != nil {
			t.Fatal(err)
		}
		tests = append(tests,
			struct {
				name    string
				hash    string
				policy  *SignaturePolicy
				wantWho string
				wantErr error
			}{"an OpenPGP-signed commit", pgp, both, "of Alice <alice@example.com>", nil},
			struct {
				name    string
				hash    string
				policy  *SignaturePolicy
				wantWho string
				wantErr error
			}{"OpenPGP without a keyring", pgp, sshOnly, "", ErrUntrusted},
			struct {
				name    string
				hash    string
				policy  *SignaturePolicy
				wantWho string
				wantErr error
			}{"SSH with both", good, both, "of alice@example.com", nil})
	} else {
		t.Log("no gpg: OpenPGP commits not tested")
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			who, err := src.VerifyCommit(tt.hash, tt.policy)
			if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil && !strings.Contains(who, tt.wantWho)) {
				t.Errorf("VerifyCommit = %q, %v; want %q, %v", who, err, tt.wantWho, tt.wantErr)
			}
			// git's own answer (it runs ssh-keygen or gpg) agrees.
			_, gerr := runErr(repo, "git", "-c", "gpg.ssh.allowedSignersFile="+signers, "verify-commit", tt.hash)
			if tt.policy == sshOnly && strings.Contains(tt.name, "OpenPGP") {
				return // gpg's keyring is not the policy's here
			}
			if (gerr == nil) != (err == nil) {
				t.Errorf("VerifyCommit: %v; git verify-commit: %v", err, gerr)
			}
		})
	}
}

// FuzzParseSSHSig: the SSH signature decoder and the allowed-signers
// parser never panic on outside input, and no blob shorter than the
// magic and version is a signature.
func FuzzParseSSHSig(f *testing.F) {
	f.Add([]byte("SSHSIG\x00\x00\x00\x01"))
	f.Add([]byte("SSHSIG\x00\x00\x00\x01\x00\x00\x00\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		if _, err := parseSSHSig(b); err == nil && len(b) < 10 {
			t.Errorf("parseSSHSig accepts %q", b)
		}
		parseAllowedSigners(b) // nor does the allowed-signers parser
	})
}
