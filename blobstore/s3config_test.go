package blobstore

import (
	"context"
	"strings"
	"testing"
)

func TestS3ConfigFromEnv(t *testing.T) {
	t.Setenv("SPOOL_S3_ENDPOINT", "http://127.0.0.1:7070")
	t.Setenv("SPOOL_S3_BUCKET", "b")
	t.Setenv("SPOOL_S3_REGION", "")
	t.Setenv("SPOOL_S3_PATH_STYLE", "true")
	t.Setenv("SPOOL_S3_PREFIX", "prod")
	c, err := S3ConfigFromEnv()
	if err != nil {
		t.Fatal(err)
	}
	want := S3Config{Endpoint: "http://127.0.0.1:7070", Bucket: "b", Region: "us-east-1", PathStyle: true, Prefix: "prod/"}
	if c != want {
		t.Fatalf("got %+v, want %+v", c, want)
	}
	t.Setenv("SPOOL_S3_PATH_STYLE", "yes please")
	if _, err := S3ConfigFromEnv(); err == nil || !strings.Contains(err.Error(), "SPOOL_S3_PATH_STYLE") {
		t.Fatalf("bad bool: %v", err)
	}
}

func TestS3ConfigValidate(t *testing.T) {
	for _, c := range []struct {
		cfg  S3Config
		want string
	}{
		{S3Config{}, "Bucket"},
		{S3Config{Bucket: "b", AccessKey: "a"}, "AccessKey and SecretKey"},
		{S3Config{Bucket: "b", Prefix: "../x"}, "Prefix"},
	} {
		if _, err := NewS3(context.Background(), c.cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("NewS3(%+v) = %v, want error about %s", c.cfg, err, c.want)
		}
	}
}
