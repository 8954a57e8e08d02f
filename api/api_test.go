package api

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestParseTile(t *testing.T) {
	tests := []struct {
		in      string
		want    Tile
		wantErr string
	}{
		{"256x256", Tile{256, 256}, ""},
		{"64X32", Tile{64, 32}, ""},
		{" 7x1 ", Tile{7, 1}, ""},
		{"128", Tile{128, 128}, ""},
		{"0x0", Tile{}, "at least 1"},
		{"0x5", Tile{}, "at least 1"},
		{"5x-1", Tile{}, "at least 1"},
		{"", Tile{}, "WIDTHxHEIGHT"},
		{"axb", Tile{}, "WIDTHxHEIGHT"},
		{"1x2x3", Tile{}, "WIDTHxHEIGHT"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseTile(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParseTile(%q) = %v, %v; want error mentioning %q", tt.in, got, err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("ParseTile(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
			}
		})
	}
}

func TestJobRequestJSON(t *testing.T) {
	req := JobRequest{Op: "blur", Input: strings.Repeat("a", 64), Params: map[string]string{"radius": "3"},
		Tile: Tile{256, 128}, Repeat: 2, Policy: PolicyEqual}
	b, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(b, []byte(`"tile":"256x128"`)) {
		t.Errorf("tile not written WxH: %s", b)
	}
	var got JobRequest
	if err := json.Unmarshal(b, &got); err != nil || !reflect.DeepEqual(got, req) {
		t.Fatalf("round trip: %v, %+v", err, got)
	}
	// No tile: the field is omitted.
	b, _ = json.Marshal(JobRequest{Op: "noop"})
	if bytes.Contains(b, []byte("tile")) {
		t.Errorf("zero tile written: %s", b)
	}
	// A zero tile sent explicitly is an error that says what to fix.
	err = json.Unmarshal([]byte(`{"op":"blur","tile":"0x0"}`), &got)
	if err == nil || !strings.Contains(err.Error(), "at least 1 pixel") {
		t.Errorf("tile 0x0 accepted or unclear: %v", err)
	}
}

func TestJobState(t *testing.T) {
	for _, s := range []JobState{JobQueued, JobRunning, JobDone, JobFailed, JobCanceled} {
		if !s.Valid() {
			t.Errorf("%s not valid", s)
		}
		if s.Final() != (s != JobQueued && s != JobRunning) {
			t.Errorf("%s: Final() = %v", s, s.Final())
		}
	}
	if JobState("paused").Valid() {
		t.Error("unknown state valid")
	}
}

func TestErrorBody(t *testing.T) {
	b, _ := json.Marshal(&Error{Message: "unknown op"})
	if string(b) != `{"error":"unknown op"}` {
		t.Errorf("error body = %s", b)
	}
}

// specSchemas returns, for each schema under components/schemas in the
// spec, the text of its definition.
func specSchemas(t testing.TB) map[string]string {
	t.Helper()
	out := map[string]string{}
	in := false
	cur := ""
	sc := bufio.NewScanner(bytes.NewReader(Spec))
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "  schemas:":
			in = true
		case in && strings.HasPrefix(line, "    ") && !strings.HasPrefix(line, "     "):
			cur = strings.TrimSuffix(strings.TrimSpace(line), ":")
		case in && cur != "":
			out[cur] += line + "\n"
		}
	}
	return out
}

// TestSpecMatchesTypes checks that every JSON field of the API types is
// described in openapi.yaml under the schema of the same name.
func TestSpecMatchesTypes(t *testing.T) {
	if !bytes.HasPrefix(Spec, []byte("openapi: 3.0")) {
		t.Fatal("spec does not start with 'openapi: 3.0'")
	}
	schemas := specSchemas(t)
	types := []any{Error{}, Health{}, OpInfo{}, ParamInfo{}, OpList{}, Register{}, Registration{},
		Heartbeat{}, WorkerInfo{}, PathInfo{}, WorkerList{}, BlobInfo{}, BlobList{}, JobRequest{}, UnitCounts{},
		Timings{}, JobStatus{}, JobList{}, PipelineRequest{}, PipelineStep{}, PipelineStatus{}, TokenRequest{}, TokenInfo{},
		TokenCreated{}, TokenList{}, UnitSpan{}, UnitTimeline{}}
	for _, v := range types {
		typ := reflect.TypeOf(v)
		def, ok := schemas[typ.Name()]
		if !ok {
			t.Errorf("schema %s missing from openapi.yaml", typ.Name())
			continue
		}
		for i := range typ.NumField() {
			f := typ.Field(i)
			if f.Anonymous {
				if !strings.Contains(def, "#/components/schemas/"+f.Type.Name()) {
					t.Errorf("schema %s does not include %s", typ.Name(), f.Type.Name())
				}
				continue
			}
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if !strings.Contains(def, " "+name+":") {
				t.Errorf("schema %s lacks property %q", typ.Name(), name)
			}
		}
	}
	for _, p := range []string{SpecPath, PathHealth, PathOps, PathWorkers, PathBlobs, PathJobs, PathPipelines, PathTokens} {
		if !bytes.Contains(Spec, []byte("\n  "+p+":\n")) {
			t.Errorf("path %s not in openapi.yaml", p)
		}
	}
}

func TestToken(t *testing.T) {
	a, b := Token([]byte("key one")), Token([]byte("key two"))
	if len(a) != 64 || a == b || a != Token([]byte("key one")) {
		t.Errorf("tokens %q and %q: want 64 hex digits, equal for equal keys only", a, b)
	}
	if strings.Contains(a, "key") {
		t.Error("token reveals the key")
	}
}

func TestFingerprint(t *testing.T) {
	fp := Fingerprint([]byte("a certificate"))
	s := FormatFingerprint(fp)
	if !strings.HasPrefix(s, "sha256:") || len(s) != 7+64 {
		t.Fatalf("FormatFingerprint = %q", s)
	}
	colons := strings.ToUpper(hex.EncodeToString(fp[:1]))
	for _, b := range fp[1:] {
		colons += ":" + strings.ToUpper(hex.EncodeToString([]byte{b}))
	}
	for _, in := range []string{s, s[7:], " SHA256:" + strings.ToUpper(s[7:]) + "\n", colons} {
		got, err := ParseFingerprint(in)
		if err != nil || !bytes.Equal(got, fp) {
			t.Errorf("ParseFingerprint(%q) = %x, %v", in, got, err)
		}
	}
	for _, in := range []string{"", "sha256:", s[:70], s + "00", "md5:" + s[7:], strings.Repeat("g", 64)} {
		if _, err := ParseFingerprint(in); !errors.Is(err, ErrFingerprint) {
			t.Errorf("ParseFingerprint(%q): %v", in, err)
		}
	}
}

func TestJoinToken(t *testing.T) {
	fp := Fingerprint([]byte("cert"))
	tok, got, err := SplitJoinToken(JoinToken("braid_abc-_", fp))
	if err != nil || tok != "braid_abc-_" || !bytes.Equal(got, fp) {
		t.Errorf("round trip: %q %x %v", tok, got, err)
	}
	if tok, got, err := SplitJoinToken(" braid_abc "); err != nil || tok != "braid_abc" || got != nil {
		t.Errorf("plain token: %q %x %v", tok, got, err)
	}
	if _, _, err := SplitJoinToken("braid_abc.123"); !errors.Is(err, ErrFingerprint) {
		t.Errorf("bad fingerprint: %v", err)
	}
}

func TestCertProof(t *testing.T) {
	k, fp := []byte("key"), Fingerprint([]byte("cert"))
	p := CertProof(k, fp)
	if len(p) != 64 || p == CertProof([]byte("other"), fp) || p == CertProof(k, Fingerprint([]byte("other cert"))) {
		t.Errorf("proofs do not depend on key and certificate: %s", p)
	}
	if p == Token(k) {
		t.Error("the proof equals the admin token")
	}
}
