//go:build tools

// Package s3gw pins VersityGW, the S3-compatible server braid's tests and CI
// run the S3 blob store against. It is a module of its own so that
// VersityGW's dependencies stay out of braid's go.mod:
//
//	cd tools/s3gw && go install github.com/versity/versitygw/cmd/versitygw
package s3gw

import _ "github.com/versity/versitygw/cmd/versitygw"
