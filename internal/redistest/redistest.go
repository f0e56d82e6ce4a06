// Package redistest starts throw-away redis-server processes for the unit
// tests of node and redlock that need a real server.
package redistest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// Start starts a redis-server of the test's own on a free loopback port,
// without persistence and with DEBUG allowed from loopback (DEBUG SLEEP
// stalls it), and returns its redis:// URL. The process is killed by its
// PID when the test ends. The test is skipped when redis-server is not
// installed (scripts/ensure-redis.sh installs it; $REDIS_SERVER names
// another binary).
func Start(t testing.TB) string {
	t.Helper()
	return StartArgs(t)
}

// StartArgs is Start with more redis-server arguments, e.g.
// "--requirepass", "pw".
func StartArgs(t testing.TB, args ...string) string {
	t.Helper()
	bin := os.Getenv("REDIS_SERVER")
	if bin == "" {
		var err error
		if bin, err = exec.LookPath("redis-server"); err != nil {
			t.Skip("redis-server not installed (run scripts/ensure-redis.sh)")
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", t.TempDir(), "--logfile", "",
		"--enable-debug-command", "local")
	cmd.Args = append(cmd.Args, args...)
	// Its own process group, and killed with the test binary.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill() // by PID: only the process started here
		<-exited
	})
	addr := "127.0.0.1:" + strconv.Itoa(port)
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return "redis://" + addr
		}
		select {
		case <-exited:
			t.Fatalf("redistest: redis-server on port %d exited at start", port)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("redistest: redis-server on port %d did not accept connections: %v", port, err)
		}
	}
}

// DeadAddr returns a loopback address where nothing listens (a port just
// released), for tests of unreachable nodes.
func DeadAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// StartTLS starts a redis-server as Start does that also serves TLS, with
// a self-signed certificate for 127.0.0.1 made here. It returns the
// plain redis:// URL (for an Admin), the TLS address (host:port) and the
// pool of roots that trusts the certificate.
func StartTLS(t testing.TB) (plainURL, tlsAddr string, roots *x509.CertPool) {
	t.Helper()
	dir := t.TempDir()
	roots = WriteCert(t, dir)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	plainURL = StartArgs(t, "--tls-port", strconv.Itoa(port),
		"--tls-cert-file", filepath.Join(dir, "cert.pem"),
		"--tls-key-file", filepath.Join(dir, "key.pem"),
		"--tls-ca-cert-file", filepath.Join(dir, "cert.pem"),
		"--tls-auth-clients", "no")
	return plainURL, "127.0.0.1:" + strconv.Itoa(port), roots
}

// WriteCert writes a self-signed certificate for 127.0.0.1, valid for an
// hour, to dir/cert.pem and its key to dir/key.pem, and returns a pool
// that trusts it.
func WriteCert(t testing.TB, dir string) *x509.CertPool {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "redlock test node"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "cert.pem"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "key.pem"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return pool
}
