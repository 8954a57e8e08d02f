package api

// BlobInfo describes one stored blob. Blobs are content-addressed: ID is
// the lowercase hex SHA-256 of the content, so uploading the same bytes
// twice yields the same ID.
type BlobInfo struct {
	ID   string `json:"id"`
	Size int64  `json:"size"`
}

// BlobList is the answer to GET /v1/blobs.
type BlobList struct {
	Blobs []BlobInfo `json:"blobs"`
}
