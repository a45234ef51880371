//go:build tools

// The command this module builds; listed so `go mod tidy` keeps its
// dependencies.
package tools

import _ "go.etcd.io/etcd/server/v3"
