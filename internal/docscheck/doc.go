// Package docscheck holds the tests that keep the project's Markdown true to the tree: every
// relative link of every .md file names a file or folder that exists (and, into a Markdown file, a
// heading that exists), every file of the repository a Markdown file names exists, and the
// README's map of the tree names every top-level folder. It has no code of its own; `go test
// ./internal/docscheck` runs it, as `make test` does.
package docscheck
