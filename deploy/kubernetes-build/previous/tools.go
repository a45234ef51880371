//go:build tools

// The node binaries of the release before the pinned one (kubelet and
// kubeadm), so the lab can roll nodes from one version to the next;
// listed so `go mod tidy` keeps their dependencies.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kubeadm"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
