//go:build tools

// Package tools pins the Pulumi CLI's main package: scripts/engine.sh builds it with `go build`.
package tools

import _ "github.com/pulumi/pulumi/pkg/v3/cmd/pulumi"
