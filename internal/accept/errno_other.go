//go:build !unix

package accept

var temporaryErrnos []error
