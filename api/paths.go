package api

// HTTP paths of the control API. Paths ending in "/" take an identifier
// after the slash, e.g. PathJobs + "42". openapi.yaml documents them all.
const (
	// SpecPath serves openapi.yaml.
	SpecPath = "/openapi.yaml"
	// PathHealth answers 200 while the server runs.
	PathHealth = "/v1/health"
	// PathOps lists the operations the server can split and assemble.
	PathOps = "/v1/ops"
	// PathWorkers registers (POST) and lists (GET) workers.
	PathWorkers = "/v1/workers"
	// PathBlobs uploads (POST) and lists (GET) blobs. POST PathBlobs +
	// QueryMember uploads a blob as a member of a dataset about to be
	// made: deleting a dataset that lists it deletes this upload, where
	// one made without it (on its own) stays.
	PathBlobs = "/v1/blobs"
	// QueryMember is the query of a member's upload (PathBlobs).
	QueryMember = "?member=1"
	// PathDatasets makes (POST) a dataset of uploaded blobs; GET
	// PathDatasets + "/ID" returns its manifest.
	PathDatasets = "/v1/datasets"
	// PathJobs submits (POST) and lists (GET) jobs.
	PathJobs = "/v1/jobs"
	// PathPipelines submits (POST) pipelines of jobs.
	PathPipelines = "/v1/pipelines"
	// PathTokens creates (POST) and lists (GET) access tokens; DELETE
	// PathTokens + "/ID-or-name" revokes one. Admin only.
	PathTokens = "/v1/tokens"
	// PathMetrics serves the server's Prometheus metrics (roles admin,
	// client and monitor).
	PathMetrics = "/metrics"
	// PathUI serves the read-only web dashboard: static files, open to
	// anyone, which read the API with the credential the user gives.
	PathUI = "/ui/"
)

// ContentTypeJSON is the media type of every JSON request and response.
const ContentTypeJSON = "application/json"

// ContentTypeSpec is the media type of openapi.yaml at SpecPath.
const ContentTypeSpec = "application/yaml"

// ContentTypeBlob is the media type of blob uploads and downloads.
const ContentTypeBlob = "application/octet-stream"
