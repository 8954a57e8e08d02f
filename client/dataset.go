package client

import (
	"context"
	"fmt"
	"net/http"
	"net/url"

	"github.com/braid-hpc/braid/api"
)

// PutDataset makes a dataset of uploaded blobs (Put), named by members'
// names, in any order; the server sorts them and stores the manifest. The
// returned ID names the dataset as a blob ID names a blob.
func (c *Client) PutDataset(ctx context.Context, members []api.DatasetMember) (api.DatasetInfo, error) {
	var info api.DatasetInfo
	err := c.sendJSON(ctx, "make dataset", http.MethodPost, api.PathDatasets, api.DatasetRequest{Members: members}, &info)
	return info, err
}

// Dataset returns the manifest of dataset id, its members sorted by
// name, each name checked (api.CheckMemberName) so that it can be used
// as a file name. A blob that is no dataset is an error with status 400
// (StatusOf).
func (c *Client) Dataset(ctx context.Context, id string) (api.Dataset, error) {
	var d api.Dataset
	if err := c.getJSON(ctx, "dataset "+id, api.PathDatasets+"/"+url.PathEscape(id), &d); err != nil {
		return d, err
	}
	if err := d.Check(); err != nil {
		return d, fmt.Errorf("dataset %s: the server sent an invalid manifest: %w", id, err)
	}
	return d, nil
}
