package cli

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"text/tabwriter"

	"github.com/braid-hpc/braid/api"
	"github.com/braid-hpc/braid/client"
	"github.com/braid-hpc/braid/internal/outfile"
)

func init() {
	register(&command{name: "ls", summary: "list the members of a dataset", run: runLs})
}

// datasetFile is a file to upload as a dataset member.
type datasetFile struct{ name, path string }

// datasetFiles lists the files of paths (files, and directories whose
// regular files are taken, not their subdirectories) as dataset members,
// named by their base names, which must be unique.
func datasetFiles(paths []string) ([]datasetFile, error) {
	var files []datasetFile
	from := map[string]string{}
	add := func(name, path string) error {
		if err := api.CheckMemberName(name); err != nil {
			return fmt.Errorf("%s: %v", path, err)
		}
		if other, dup := from[name]; dup {
			return fmt.Errorf("%s and %s have the same name %q; a dataset's names are unique: rename one", other, path, name)
		}
		from[name] = path
		files = append(files, datasetFile{name, path})
		return nil
	}
	for _, p := range paths {
		fi, err := os.Stat(p)
		if err != nil {
			return nil, err
		}
		if !fi.IsDir() {
			if !fi.Mode().IsRegular() {
				return nil, fmt.Errorf("%s is not a regular file", p)
			}
			if err := add(filepath.Base(p), p); err != nil {
				return nil, err
			}
			continue
		}
		entries, err := os.ReadDir(p)
		if err != nil {
			return nil, err
		}
		for _, e := range entries {
			path := filepath.Join(p, e.Name())
			if e.IsDir() {
				return nil, fmt.Errorf("%s is a directory: a dataset is flat; put its files apart, or give the files", path)
			}
			if !e.Type().IsRegular() {
				fi, err := os.Stat(path) // a symbolic link to a file is taken
				if err != nil || !fi.Mode().IsRegular() {
					return nil, fmt.Errorf("%s is not a regular file", path)
				}
			}
			if err := add(e.Name(), path); err != nil {
				return nil, err
			}
		}
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no files: a dataset has at least one member")
	}
	if len(files) > api.MaxMembers {
		return nil, fmt.Errorf("%d files: a dataset has at most %d members", len(files), api.MaxMembers)
	}
	return files, nil
}

// putUploads is how many members put uploads at once.
const putUploads = 8

// putDataset uploads files and makes a dataset of them. Nothing is made
// unless every upload succeeded.
func putDataset(ctx context.Context, c *client.Client, files []datasetFile) (api.DatasetInfo, error) {
	members := make([]api.DatasetMember, len(files))
	errs := make([]error, len(files))
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(putUploads, len(files)) {
		wg.Go(func() {
			for i := range next {
				f, err := os.Open(files[i].path)
				if err != nil {
					errs[i] = err
					continue
				}
				info, err := c.PutMember(ctx, f)
				f.Close()
				if err != nil {
					errs[i] = fmt.Errorf("upload %s: %w", files[i].path, err)
					continue
				}
				members[i] = api.DatasetMember{Name: files[i].name, Size: info.Size, Blob: info.ID}
			}
		})
	}
	for i := range files {
		if ctx.Err() != nil {
			break
		}
		next <- i
	}
	close(next)
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return api.DatasetInfo{}, err
		}
	}
	if err := ctx.Err(); err != nil {
		return api.DatasetInfo{}, err
	}
	return c.PutDataset(ctx, members)
}

func runLs(ctx context.Context, env *Env, args []string) int {
	fs := newFlags(env, "ls", "DATASET [flags]", `
Lists the members of dataset DATASET (see 'braid put DIR'), sorted by
name: name, size in bytes and blob id, one a line.`)
	cf := addClientFlags(fs, 0)
	id, code := oneArg(env, fs, args, "dataset ID")
	if code >= 0 {
		return code
	}
	c, ctx, cancel, err := cf.client(ctx)
	if err != nil {
		env.Errorf("ls: %v", err)
		return 2
	}
	defer cancel()
	d, err := c.Dataset(ctx, id)
	if err != nil {
		return clientFail(env, "ls", err)
	}
	if *cf.json {
		for _, m := range d.Members {
			jsonLine(env.Stdout, m)
		}
		return 0
	}
	tw := tabwriter.NewWriter(env.Stdout, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tSIZE\tBLOB")
	var total int64
	for _, m := range d.Members {
		fmt.Fprintf(tw, "%s\t%d\t%s\n", m.Name, m.Size, m.Blob)
		total += m.Size
	}
	tw.Flush()
	fmt.Fprintf(env.Stderr, "braid: %d members, %d bytes\n", len(d.Members), total)
	return 0
}

// getDataset downloads the members of d into the directory dir, made if
// missing, each file whole or not at all; an existing file is replaced
// only if replace is set.
func getDataset(ctx context.Context, c *client.Client, id string, d api.Dataset, dir string, replace bool) (int64, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 0, err
	}
	var total int64
	for _, m := range d.Members {
		tmp, err := outfile.CreateTemp(dir, "."+m.Name+".part-*", outfile.Perm)
		if err != nil {
			return total, err
		}
		n, err := c.GetMember(ctx, id, m.Blob, tmp)
		if cerr := tmp.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			err = outfile.Place(tmp.Name(), filepath.Join(dir, m.Name), replace)
		}
		os.Remove(tmp.Name())
		if err != nil {
			return total, fmt.Errorf("member %s: %w", m.Name, forceHint("get", err))
		}
		total += n
	}
	return total, nil
}
