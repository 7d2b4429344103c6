//go:build tools

// Package tools pins the Python language host's main package: scripts/engine.sh builds it with `go build`.
package tools

import _ "github.com/pulumi/pulumi/sdk/v3/python/cmd/pulumi-language-python"
