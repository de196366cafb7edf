package main

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// pki holds the paths of the files generated for one control plane.
type pki struct {
	CACert      string // CA certificate (PEM): --client-ca-file, --root-ca-file, kubeconfig
	CAPEM       []byte // its contents
	ServingCert string // serving certificate for 127.0.0.1/localhost, signed by the CA
	ServingKey  string
	SAKey       string // service-account signing key (RSA, PKCS#1 PEM)
	SAPub       string // its public key (PKIX PEM)
	TokenFile   string // --token-auth-file
	Token       string // the static bearer token (user "admin", group system:masters)
}

func writePEM(path, typ string, der []byte, mode os.FileMode) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), mode)
}

func serial() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
}

// generatePKI writes a CA, a serving certificate, a service-account key pair and a
// static token file into dir. Everything is valid for one year from now.
func generatePKI(dir string) (*pki, error) {
	p := &pki{
		CACert:      filepath.Join(dir, "ca.crt"),
		ServingCert: filepath.Join(dir, "serving.crt"),
		ServingKey:  filepath.Join(dir, "serving.key"),
		SAKey:       filepath.Join(dir, "sa.key"),
		SAPub:       filepath.Join(dir, "sa.pub"),
		TokenFile:   filepath.Join(dir, "tokens.csv"),
	}
	now := time.Now().Add(-time.Hour) // tolerate small clock skew
	notAfter := now.Add(365 * 24 * time.Hour)

	// CA.
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	sn, err := serial()
	if err != nil {
		return nil, err
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          sn,
		Subject:               pkix.Name{CommonName: "realcluster-ca"},
		NotBefore:             now,
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, caKey.Public(), caKey)
	if err != nil {
		return nil, err
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}
	p.CAPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
	if err := os.WriteFile(p.CACert, p.CAPEM, 0o644); err != nil {
		return nil, err
	}

	// Serving certificate for the apiserver (and the controller manager's secure port).
	srvKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	if sn, err = serial(); err != nil {
		return nil, err
	}
	srvTmpl := &x509.Certificate{
		SerialNumber: sn,
		Subject:      pkix.Name{CommonName: "kube-apiserver"},
		NotBefore:    now,
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames: []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
			"kubernetes.default.svc.cluster.local"},
		// 10.0.0.1 is the first address of the (virtual, never routed) service range,
		// i.e. the ClusterIP of the "kubernetes" Service.
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("::1"), net.ParseIP("10.0.0.1")},
	}
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, caCert, srvKey.Public(), caKey)
	if err != nil {
		return nil, err
	}
	if err := writePEM(p.ServingCert, "CERTIFICATE", srvDER, 0o644); err != nil {
		return nil, err
	}
	if err := writeECKey(p.ServingKey, srvKey); err != nil {
		return nil, err
	}

	// Service-account key pair.
	saKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	if err := writePEM(p.SAKey, "RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(saKey), 0o600); err != nil {
		return nil, err
	}
	if err := writePublicKey(p.SAPub, saKey.Public()); err != nil {
		return nil, err
	}

	// Static token: token,user,uid,"group1,group2".
	buf := make([]byte, 32)
	if _, err := rand.Read(buf); err != nil {
		return nil, err
	}
	p.Token = hex.EncodeToString(buf)
	line := fmt.Sprintf("%s,admin,admin,\"system:masters\"\n", p.Token)
	if err := os.WriteFile(p.TokenFile, []byte(line), 0o600); err != nil {
		return nil, err
	}
	return p, nil
}

func writeECKey(path string, key *ecdsa.PrivateKey) error {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	return writePEM(path, "EC PRIVATE KEY", der, 0o600)
}

func writePublicKey(path string, pub crypto.PublicKey) error {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return err
	}
	return writePEM(path, "PUBLIC KEY", der, 0o644)
}
