package deploy

import (
	"fmt"
	"strings"
)

// spoolImage is the repository the spool image is published to.
const spoolImage = "ghcr.io/spool-run/spool"

// knownImages are the third-party images the deploy files may use, each
// pinned to a version (never a moving "latest").
var knownImages = map[string]bool{
	"redis:7.4.2":              true,
	"versity/versitygw:v1.8.0": true,
	"golang:1.26":              true,
	"gcr.io/distroless/static-debian12:nonroot": true,
}

// checkImage says what is wrong with an image reference in a manifest: it
// must be the spool image with an explicit, non-latest tag or digest, or a
// known pinned image.
func checkImage(image string) error {
	if knownImages[image] {
		return nil
	}
	repo, tag, hasTag := strings.Cut(image, ":")
	if at := strings.Index(image, "@sha256:"); at >= 0 {
		repo, tag, hasTag = image[:at], image[at+1:], true
	}
	if repo != spoolImage {
		return fmt.Errorf("image %q is neither %s nor a known pinned image", image, spoolImage)
	}
	if !hasTag || tag == "" || tag == "latest" {
		return fmt.Errorf("image %q must carry a version tag or digest, not latest", image)
	}
	return nil
}
