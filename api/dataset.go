package api

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// A dataset is a list of blobs with names: its manifest, a blob itself,
// is the JSON of a Dataset, members sorted by name, and the manifest's
// sha256 is the dataset's ID. POST PathDatasets makes one from uploaded
// blobs; a job whose input is a dataset maps its operation over every
// member.

// DatasetFormat is Dataset.Format: a manifest's bytes begin with
// DatasetMagic.
const DatasetFormat = "braid-dataset/1"

// DatasetMagic is how every manifest begins. A blob that begins so is
// not for that a dataset: only one that the server made (POST
// PathDatasets, a job's output) is.
const DatasetMagic = `{"format":"` + DatasetFormat + `",`

// Bounds of a dataset.
const (
	// MaxMembers bounds a dataset's members.
	MaxMembers = 100_000
	// MaxMemberName bounds a member's name, in bytes.
	MaxMemberName = 255
)

// Dataset is a dataset's manifest (GET PathDatasets/{id}).
type Dataset struct {
	// Format is DatasetFormat.
	Format  string          `json:"format"`
	Members []DatasetMember `json:"members"`
}

// DatasetMember is one named blob of a dataset.
type DatasetMember struct {
	// Name is unique in the dataset: a file name, 1 to 255 bytes of
	// UTF-8 without '/', NUL or a newline, not "." or "..".
	Name string `json:"name"`
	Size int64  `json:"size"`
	// Blob is the member's blob ID, the sha256 of its bytes.
	Blob string `json:"blob"`
}

// DatasetRequest makes a dataset (POST PathDatasets) of uploaded blobs,
// in any order.
type DatasetRequest struct {
	Members []DatasetMember `json:"members"`
}

// DatasetInfo is the answer to POST PathDatasets.
type DatasetInfo struct {
	// ID is the manifest's blob ID.
	ID      string `json:"id"`
	Members int    `json:"members"`
	// Size is the bytes of all members.
	Size int64 `json:"size"`
}

// CheckMemberName says what is wrong with a member's name, or nil.
func CheckMemberName(name string) error {
	switch {
	case name == "" || name == "." || name == "..":
		return fmt.Errorf("member name %q: want a file name", name)
	case len(name) > MaxMemberName:
		return fmt.Errorf("member name %.40q...: longer than %d bytes", name, MaxMemberName)
	case strings.ContainsAny(name, "/\x00\n"):
		return fmt.Errorf("member name %q: no '/', NUL or newline", name)
	case !utf8.ValidString(name):
		return fmt.Errorf("member name %q: not UTF-8", name)
	}
	return nil
}

// Check says what is wrong with a manifest's members, sorted by name as
// a manifest keeps them: no member, too many, a bad name, a name twice
// or out of order, a bad blob ID or size.
func (d *Dataset) Check() error {
	if len(d.Members) == 0 {
		return fmt.Errorf("dataset: no members; a dataset has 1 to %d", MaxMembers)
	}
	if len(d.Members) > MaxMembers {
		return fmt.Errorf("dataset: %d members; a dataset has at most %d", len(d.Members), MaxMembers)
	}
	for i, m := range d.Members {
		if err := CheckMemberName(m.Name); err != nil {
			return fmt.Errorf("dataset: %w", err)
		}
		if i > 0 {
			switch prev := d.Members[i-1].Name; {
			case prev == m.Name:
				return fmt.Errorf("dataset: member name %q appears twice; names are unique", m.Name)
			case prev > m.Name:
				return fmt.Errorf("dataset: member %q comes after %q; a manifest lists members sorted by name", m.Name, prev)
			}
		}
		if len(m.Blob) != 64 || strings.Trim(m.Blob, "0123456789abcdef") != "" {
			return fmt.Errorf("dataset: member %q: blob %q is not a blob id", m.Name, m.Blob)
		}
		if m.Size < 0 {
			return fmt.Errorf("dataset: member %q: size %d", m.Name, m.Size)
		}
	}
	return nil
}
