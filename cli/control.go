package cli

import (
	"errors"
	"fmt"

	"github.com/braid-hpc/braid/api"
	"github.com/braid-hpc/braid/client"

	"github.com/spf13/pflag"
)

// controlFlags are the flags of a command that calls a server's control
// API: the cluster key, a token, the server's certificate fingerprint and
// plain HTTP.
type controlFlags struct {
	key         func() ([]byte, error)
	token       *string
	fingerprint *string
	insecure    *bool
}

func addControlFlags(fs *pflag.FlagSet) *controlFlags {
	return &controlFlags{
		key: keyFlag(fs),
		token: fs.String("token", getenv("BRAID_TOKEN"), "control API `token` (braid token create), or a join token that also pins "+
			"the server's certificate; BRAID_TOKEN sets the default (default: the cluster key's admin credential)"),
		fingerprint: fs.String("server-fingerprint", getenv("BRAID_SERVER_FINGERPRINT"), "accept only the server certificate with this "+
			"SHA-256 `fingerprint` (default: the join token's, else the server's proof of the cluster key)"),
		insecure: fs.Bool("insecure-http", false, "talk plain HTTP to a server started with --insecure-http: "+
			"credentials travel readable and replayable"),
	}
}

// controlAuth is what controlFlags resolved to.
type controlAuth struct {
	key         []byte // nil if only a token was given
	token       string
	fingerprint []byte
	insecure    bool
}

// resolve reads the flags. The cluster key is required when needKey (a
// worker's data plane needs it) or when there is no token.
func (f *controlFlags) resolve(needKey bool) (controlAuth, error) {
	var a controlAuth
	a.token, a.insecure = *f.token, *f.insecure
	key, err := f.key()
	switch {
	case err == nil:
		a.key = key
	case errors.Is(err, errNoKey) && a.token != "" && !needKey:
	default:
		if errors.Is(err, errNoKey) && !needKey {
			return a, fmt.Errorf("%w; or pass a token with --token TOKEN (or BRAID_TOKEN)", errNoKey)
		}
		return a, err
	}
	if *f.fingerprint != "" {
		fp, err := api.ParseFingerprint(*f.fingerprint)
		if err != nil {
			return a, fmt.Errorf("--server-fingerprint: %w", err)
		}
		a.fingerprint = fp
	}
	if a.token != "" {
		if _, _, err := api.SplitJoinToken(a.token); err != nil {
			return a, fmt.Errorf("--token: %w", err)
		}
	}
	return a, nil
}

// options returns the client options of a.
func (a controlAuth) options() []client.Option {
	var opts []client.Option
	if a.key != nil {
		opts = append(opts, client.WithKey(a.key))
	}
	if a.token != "" {
		opts = append(opts, client.WithToken(a.token))
	}
	if a.fingerprint != nil {
		opts = append(opts, client.WithFingerprint(a.fingerprint))
	}
	if a.insecure {
		opts = append(opts, client.WithInsecureHTTP())
	}
	return opts
}
