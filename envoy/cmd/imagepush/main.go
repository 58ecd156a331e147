// Command imagepush pushes the image of an OCI image layout (what cmd/wasmimage and
// cmd/serviceimage write) to a registry, with go-containerregistry, and prints the digest to pin:
//
//	imagepush -layout build/image/oci -tag 0.1.0 -to registry.example.com/meshlimit/meshlimit:0.1.0
//
// make push runs it for both images. Credentials come from the Docker configuration
// (~/.docker/config.json or $DOCKER_CONFIG, with its credential helpers), which `docker login`,
// `crane auth login` and `podman login` write; without an entry the push is anonymous. The digest
// is the image's own: the registry stores the bytes of the layout unchanged.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/meshlimit/meshlimit/envoy/internal/ociimage"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "imagepush:", err)
		os.Exit(1)
	}
}

func run(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("imagepush", flag.ContinueOnError)
	fs.SetOutput(out)
	dir := fs.String("layout", "", "the OCI image layout `directory` to push from (required)")
	tag := fs.String("tag", "", "the layout's image to push, by its tag (default: its only image)")
	to := fs.String("to", "", "the image reference to push to, REGISTRY/REPOSITORY:TAG (required)")
	insecure := fs.Bool("insecure", false, "allow a registry served over plain HTTP (localhost and 127.0.0.1 always are)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	switch {
	case fs.NArg() > 0:
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	case *dir == "" || *to == "":
		return errors.New("-layout and -to are required")
	}
	var opts []name.Option
	if *insecure {
		opts = append(opts, name.Insecure)
	}
	ref, err := name.ParseReference(*to, opts...)
	if err != nil {
		return fmt.Errorf("-to: %w", err)
	}
	img, err := ociimage.Image(*dir, *tag)
	if err != nil {
		return err
	}
	if err := remote.Write(ref, img, remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
		return fmt.Errorf("push %s: %w", ref, err)
	}
	digest, err := img.Digest()
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "pushed %s\n  digest %s\n  pin:   %s@%s\n", ref, digest, ref.Context(), digest)
	return nil
}
