package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/specstar/replicator/internal/testsupport/testfixtures"
)

// TestAWSSDKLinesFollowTheLogFormat (issue 34, smaller items): with
// --log-format json every stderr line is one JSON object, but the AWS
// SDK wrote its own "falling back to IMDSv1" warning as plain text. Here
// the SDK looks for credentials at an instance metadata service (a local
// one that refuses tokens, as many do) and warns; the warning must be a
// JSON line like every other.
func TestAWSSDKLinesFollowTheLogFormat(t *testing.T) {
	imds := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "no tokens here", http.StatusForbidden)
	}))
	defer imds.Close()
	dir := t.TempDir()
	cmd := exec.Command(buildReplicator(t), "verify", "--log-format", "json",
		"--from", testfixtures.Path(t, "small.acbak"), "--to", "s3://bkt/{model}/data/?endpoint=http://127.0.0.1:1&max_attempts=1")
	cmd.Env = []string{
		"HOME=" + dir, "PATH=/usr/bin:/bin",
		"AWS_EC2_METADATA_SERVICE_ENDPOINT=" + imds.URL,
		"AWS_SHARED_CREDENTIALS_FILE=" + filepath.Join(dir, "none"), "AWS_CONFIG_FILE=" + filepath.Join(dir, "none"),
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	_ = cmd.Run() // fails: no credentials anywhere
	if !strings.Contains(stderr.String(), "falling back to IMDSv1") {
		t.Fatalf("the SDK did not warn of its IMDSv1 fallback, so this checks nothing:\n%s", stderr.String())
	}
	for _, line := range strings.Split(strings.TrimSpace(stderr.String()), "\n") {
		var obj map[string]any
		if err := json.Unmarshal([]byte(line), &obj); err != nil {
			t.Errorf("a stderr line is not JSON: %q", line)
		}
	}
}
