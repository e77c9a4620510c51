// Package k8s holds no code: deploy/k8s is the Kubernetes deployment (a
// Dockerfile, kustomize bases and overlays), and this package's tests hold
// it to what a cluster accepts. It exists so that only those tests import
// k8s.io/api, never the shipped binaries.
package k8s
