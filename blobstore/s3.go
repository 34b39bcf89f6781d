package blobstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"
)

// S3Config configures the S3 backend.
type S3Config struct {
	// Endpoint is the S3-compatible endpoint URL ("http://127.0.0.1:7070").
	// Default: empty, meaning AWS S3 itself for Region.
	Endpoint string
	// Bucket must exist. Required.
	Bucket string
	// Region. Default "us-east-1".
	Region string
	// PathStyle addresses the bucket as endpoint/bucket/key instead of
	// bucket.endpoint/key; most self-hosted servers need it. Default false.
	PathStyle bool
	// Prefix is prepended to every key inside the bucket, so several
	// deployments can share one bucket. A "/" is appended when missing.
	// Default empty.
	Prefix string
	// AccessKey and SecretKey are static credentials. Default empty: the
	// standard AWS credential chain (env, shared config, IMDS, IRSA, ...).
	AccessKey string
	SecretKey string
}

// S3ConfigFromEnv reads SPOOL_S3_ENDPOINT, SPOOL_S3_BUCKET, SPOOL_S3_REGION,
// SPOOL_S3_PATH_STYLE (a strconv.ParseBool value) and SPOOL_S3_PREFIX.
// Credentials come from the standard chain (AWS_ACCESS_KEY_ID, ...).
func S3ConfigFromEnv() (S3Config, error) {
	c := S3Config{
		Endpoint: os.Getenv("SPOOL_S3_ENDPOINT"),
		Bucket:   os.Getenv("SPOOL_S3_BUCKET"),
		Region:   os.Getenv("SPOOL_S3_REGION"),
		Prefix:   os.Getenv("SPOOL_S3_PREFIX"),
	}
	if v := os.Getenv("SPOOL_S3_PATH_STYLE"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return S3Config{}, fmt.Errorf("SPOOL_S3_PATH_STYLE=%q: want true or false", v)
		}
		c.PathStyle = b
	}
	return c.WithDefaults(), nil
}

// WithDefaults fills the defaults documented on the fields.
func (c S3Config) WithDefaults() S3Config {
	if c.Region == "" {
		c.Region = "us-east-1"
	}
	if c.Prefix != "" && !strings.HasSuffix(c.Prefix, "/") {
		c.Prefix += "/"
	}
	return c
}

func (c S3Config) validate() error {
	switch {
	case c.Bucket == "":
		return fmt.Errorf("s3 config: Bucket is required")
	case (c.AccessKey == "") != (c.SecretKey == ""):
		return fmt.Errorf("s3 config: AccessKey and SecretKey must be set together")
	case c.Prefix != "" && ValidateKey(strings.TrimSuffix(c.Prefix, "/")) != nil:
		return fmt.Errorf("s3 config: Prefix %q: %w", c.Prefix, ValidateKey(strings.TrimSuffix(c.Prefix, "/")))
	}
	return nil
}

// S3 is a Store on an S3-compatible bucket. PutIfAbsent is a conditional
// PutObject (If-None-Match: *), so create-only is enforced by the server.
// The SDK's standard retries apply to every call.
type S3 struct {
	client *s3.Client
	cfg    S3Config
}

var _ Store = (*S3)(nil)

// NewS3 builds the client. It does not contact the server.
func NewS3(ctx context.Context, cfg S3Config) (*S3, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	opts := []func(*config.LoadOptions) error{config.WithRegion(cfg.Region)}
	if cfg.AccessKey != "" {
		opts = append(opts, config.WithCredentialsProvider(
			credentials.NewStaticCredentialsProvider(cfg.AccessKey, cfg.SecretKey, "")))
	}
	awsCfg, err := config.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("s3 config: %w", err)
	}
	client := s3.NewFromConfig(awsCfg, func(o *s3.Options) {
		if cfg.Endpoint != "" {
			o.BaseEndpoint = aws.String(cfg.Endpoint)
		}
		o.UsePathStyle = cfg.PathStyle
		// Many S3-compatible servers reject the SDK's default streaming
		// checksum trailers; send checksums only where the API needs them.
		o.RequestChecksumCalculation = aws.RequestChecksumCalculationWhenRequired
		o.ResponseChecksumValidation = aws.ResponseChecksumValidationWhenRequired
	})
	return &S3{client: client, cfg: cfg}, nil
}

// Client returns the underlying SDK client (for benchmarks and tooling).
func (s *S3) Client() *s3.Client { return s.client }

// Config returns the effective configuration.
func (s *S3) Config() S3Config { return s.cfg }

func (s *S3) obj(key string) (string, error) {
	if err := ValidateKey(key); err != nil {
		return "", err
	}
	return s.cfg.Prefix + key, nil
}

// Put writes data at key with PutObject, replacing any object there.
func (s *S3) Put(ctx context.Context, key string, data []byte) error {
	k, err := s.obj(key)
	if err != nil {
		return err
	}
	_, err = s.client.PutObject(ctx, &s3.PutObjectInput{
		Bucket: aws.String(s.cfg.Bucket), Key: aws.String(k),
		Body: bytes.NewReader(data), ContentLength: aws.Int64(int64(len(data))),
	})
	if err != nil {
		return fmt.Errorf("put %s: %w", key, err)
	}
	return nil
}

// PutIfAbsent writes data at key with a conditional PutObject
// (If-None-Match: *); it returns ErrExists when the object exists or a
// concurrent conditional write won.
func (s *S3) PutIfAbsent(ctx context.Context, key string, data []byte) error {
	k, err := s.obj(key)
	if err != nil {
		return err
	}
	// A large body is not sent to an object that is there already (a
	// bundle's content-addressed blobs are, on every run after the
	// first): a server may answer the conditional put's 412 as soon as it
	// has the headers and close the connection while the client still
	// writes the body, which the client sees as a reset, not as the 412.
	large := len(data) >= largeConditionalPut
	if large {
		if _, err := s.Stat(ctx, key); err == nil {
			return ErrExists
		} else if !errors.Is(err, ErrNotFound) {
			return fmt.Errorf("put-if-absent %s: %w", key, err)
		}
	}
	_, err = s.client.PutObject(ctx, &s3.PutObjectInput{
		Bucket: aws.String(s.cfg.Bucket), Key: aws.String(k),
		Body: bytes.NewReader(data), ContentLength: aws.Int64(int64(len(data))),
		IfNoneMatch: aws.String("*"),
	})
	if err != nil {
		if isPreconditionFailed(err) {
			return ErrExists
		}
		// The same, when another writer made the object meanwhile: a
		// connection that failed under a large body to an object that
		// exists now was that 412.
		if large && httpStatus(err) == 0 {
			if _, serr := s.Stat(ctx, key); serr == nil {
				return ErrExists
			}
		}
		return fmt.Errorf("put-if-absent %s: %w", key, err)
	}
	return nil
}

// largeConditionalPut is the body size from which PutIfAbsent looks
// before it writes (one HEAD more, against a body not sent for nothing).
const largeConditionalPut = 1 << 20

// Get returns the object's bytes, or ErrNotFound.
func (s *S3) Get(ctx context.Context, key string) ([]byte, error) {
	k, err := s.obj(key)
	if err != nil {
		return nil, err
	}
	out, err := s.client.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(s.cfg.Bucket), Key: aws.String(k)})
	if err != nil {
		if isNotFound(err) {
			return nil, ErrNotFound
		}
		return nil, fmt.Errorf("get %s: %w", key, err)
	}
	defer out.Body.Close()
	var buf bytes.Buffer
	if out.ContentLength != nil && *out.ContentLength > 0 {
		buf.Grow(int(*out.ContentLength))
	}
	if _, err := io.Copy(&buf, out.Body); err != nil {
		return nil, fmt.Errorf("get %s: %w", key, err)
	}
	return buf.Bytes(), nil
}

// Stat returns the object's info from HeadObject, or ErrNotFound.
func (s *S3) Stat(ctx context.Context, key string) (Info, error) {
	k, err := s.obj(key)
	if err != nil {
		return Info{}, err
	}
	out, err := s.client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(s.cfg.Bucket), Key: aws.String(k)})
	if err != nil {
		if isNotFound(err) {
			return Info{}, ErrNotFound
		}
		return Info{}, fmt.Errorf("stat %s: %w", key, err)
	}
	return Info{Key: key, Size: aws.ToInt64(out.ContentLength), Modified: aws.ToTime(out.LastModified), ETag: trimETag(out.ETag)}, nil
}

// List returns every object under the configured prefix whose key
// starts with prefix, sorted by key. Objects whose names are not valid
// keys (written by something else) are skipped.
func (s *S3) List(ctx context.Context, prefix string) ([]Info, error) {
	p := s3.NewListObjectsV2Paginator(s.client, &s3.ListObjectsV2Input{
		Bucket: aws.String(s.cfg.Bucket), Prefix: aws.String(s.cfg.Prefix + prefix),
	})
	var out []Info
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("list %q: %w", prefix, err)
		}
		for _, o := range page.Contents {
			k := strings.TrimPrefix(aws.ToString(o.Key), s.cfg.Prefix)
			if ValidateKey(k) != nil { // written by something else; not addressable here
				continue
			}
			out = append(out, Info{Key: k, Size: aws.ToInt64(o.Size), Modified: aws.ToTime(o.LastModified), ETag: trimETag(o.ETag)})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, nil
}

// Delete removes the object at key; a missing key is not an error.
func (s *S3) Delete(ctx context.Context, key string) error {
	k, err := s.obj(key)
	if err != nil {
		return err
	}
	_, err = s.client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(s.cfg.Bucket), Key: aws.String(k)})
	if err != nil && !isNotFound(err) {
		return fmt.Errorf("delete %s: %w", key, err)
	}
	return nil
}

func trimETag(e *string) string { return strings.Trim(aws.ToString(e), `"`) }

func httpStatus(err error) int {
	var re *awshttp.ResponseError
	if errors.As(err, &re) {
		return re.HTTPStatusCode()
	}
	return 0
}

func apiCode(err error) string {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorCode()
	}
	return ""
}

func isNotFound(err error) bool {
	switch apiCode(err) {
	case "NoSuchKey", "NotFound":
		return true
	}
	return httpStatus(err) == http.StatusNotFound && apiCode(err) != "NoSuchBucket"
}

// isPreconditionFailed: 412 PreconditionFailed (the object exists) or 409
// ConditionalRequestConflict (a concurrent conditional write won).
func isPreconditionFailed(err error) bool {
	switch apiCode(err) {
	case "PreconditionFailed", "ConditionalRequestConflict":
		return true
	}
	st := httpStatus(err)
	return st == http.StatusPreconditionFailed || (st == http.StatusConflict && apiCode(err) == "")
}
