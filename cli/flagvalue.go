package cli

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/pflag"
)

// A flag's value is checked when it is set, wherever it comes from (the
// command line, a BRAID_ variable or a --config file), so that the error
// can say where the bad value was written: "--max-data", "BRAID_MAX_DATA"
// or "/etc/braid/server.yaml:4: max-data". Flags of a byte count are a
// sizeValue; pflag's own types (durations, numbers, booleans) get their
// accepted forms spelled out by valueHint.

// sizeValue is a flag holding a byte count written as 65536, 64K, 500G or
// 1TiB, between min and max (max 0: no bound). Zero is its unset value
// only when min is 0.
type sizeValue struct {
	n        int64
	text     string
	min, max int64
	example  string // "500G, or 0 for no limit"
}

// sizeFlag defines a sizeValue flag with default def (parsed, so a bad
// default is a programming error caught by every test of the command).
func sizeFlag(fs *pflag.FlagSet, name, def string, min, max int64, example, usage string) *sizeValue {
	v := &sizeValue{min: min, max: max, example: example}
	if def != "" {
		if err := v.Set(def); err != nil {
			panic(fmt.Sprintf("cli: default of --%s: %v", name, err))
		}
	}
	fs.Var(v, name, usage)
	return v
}

func (v *sizeValue) Set(s string) error {
	n, err := parseSize(s)
	if err != nil || n < v.min || (v.max > 0 && n > v.max) {
		return fmt.Errorf("want a size such as %s", v.example)
	}
	v.n, v.text = n, strings.TrimSpace(s)
	return nil
}

func (v *sizeValue) String() string { return v.text }
func (v *sizeValue) Type() string   { return "size" }

// Bytes is the value, 0 when the flag was not given and has no default.
func (v *sizeValue) Bytes() int64 { return v.n }

// durationForms are the forms time.ParseDuration accepts, for errors.
const durationForms = "a duration such as 30s, 5m, 1h30m or 250ms (a number and a unit: ns, us, ms, s, m or h)"

// valueHint returns what a flag of type typ accepts, for pflag's own
// value types whose parse errors ("time: invalid duration", "strconv.
// ParseInt: ...") do not say; "" for the others, whose Set says it.
func valueHint(typ string) string {
	switch typ {
	case "duration":
		return durationForms
	case "int", "int8", "int16", "int32", "int64", "uint", "uint8", "uint16", "uint32", "uint64":
		return "a whole number"
	case "float32", "float64":
		return "a number such as 0.5"
	case "bool":
		return "true or false"
	}
	return ""
}

// badValue rewrites err when it is pflag's *InvalidValueError: where
// names the value and where it was written (`--timeout "long"`,
// `BRAID_TIMEOUT="long"`, `server.yaml:3: timeout "long"`), and the
// message says what the flag accepts: `--timeout "long": want a duration
// such as 30s, ...`. Other errors are returned as they are.
func badValue(err error, where func(f *pflag.Flag, value string) string) error {
	var ive *pflag.InvalidValueError
	if !errors.As(err, &ive) {
		return err
	}
	f := ive.GetFlag()
	msg := ive.Unwrap().Error()
	if hint := valueHint(f.Value.Type()); hint != "" {
		msg = "want " + hint
	}
	return fmt.Errorf("%s: %s", where(f, ive.GetValue()), msg)
}
