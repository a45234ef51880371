//go:build tools

// The command this module builds; listed so `go mod tidy` keeps its
// dependencies.
package tools

import _ "github.com/coredns/coredns"
