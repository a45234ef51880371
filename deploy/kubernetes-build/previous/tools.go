//go:build tools

// The binaries of the release before the pinned one: kubelet and kubeadm,
// so the lab can roll nodes from one version to the next, and the control
// plane kubeadm runs (kube-apiserver, kube-controller-manager,
// kube-scheduler), so a cluster can be created at this version and
// upgraded; listed so `go mod tidy` keeps their dependencies.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubeadm"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
