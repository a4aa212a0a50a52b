/**
 * Reading and checking a TLS certificate/key pair from PEM files (`--tls_cert_file`,
 * `--tls_key_file`). Every failure is an Error whose message names the file at fault.
 */
import { readFileSync } from 'node:fs';
import { X509Certificate, createPrivateKey, type KeyObject } from 'node:crypto';
import { createSecureContext, type SecureContext } from 'node:tls';
import { certificateInfoFromPem, type CertificateInfo } from './certificate.js';
import { SchemaOptionError } from '../base/util/option-error.js';

export interface TlsPair {
  cert: Buffer;
  key: Buffer;
}

/** A checked pair: the bytes, a ready SecureContext and the leaf's details for admin /certs. */
export interface LoadedPair extends TlsPair {
  context: SecureContext;
  info: CertificateInfo;
}

function readPem(path: string, what: string): Buffer {
  try {
    return readFileSync(path);
  } catch (err) {
    const e = err as NodeJS.ErrnoException;
    const why = e.code === 'EISDIR' ? 'EISDIR (a directory, not a file)' : (e.code ?? e.message);
    throw new Error(`cannot read ${what} ${path}: ${why}`);
  }
}

/**
 * Checks that `cert` holds a PEM certificate (chain), `key` a PEM private key, and that they belong
 * together; returns the SecureContext and the leaf's details. `label` is what admin /certs shows as
 * the path (the certificate file, or `acme:<host>`).
 */
export function checkPair(cert: Buffer | string, key: Buffer | string, names: { certFile: string; keyFile: string; label?: string }): LoadedPair {
  const { certFile, keyFile } = names;
  let leaf: X509Certificate;
  try {
    leaf = new X509Certificate(cert);
  } catch (err) {
    throw new Error(`TLS certificate file ${certFile} holds no PEM certificate: ${(err as Error).message}`);
  }
  let keyObject: KeyObject;
  try {
    keyObject = createPrivateKey(key);
  } catch (err) {
    throw new Error(`TLS key file ${keyFile} holds no usable PEM private key: ${(err as Error).message}`);
  }
  if (!leaf.checkPrivateKey(keyObject)) {
    throw new Error(`TLS key file ${keyFile} does not match the certificate in ${certFile} (mismatched pair)`);
  }
  let context: SecureContext;
  try {
    context = createSecureContext({ cert, key });
  } catch (err) {
    throw new Error(`TLS certificate ${certFile} and key ${keyFile} do not load together: ${(err as Error).message}`);
  }
  const certBuf = Buffer.isBuffer(cert) ? cert : Buffer.from(cert);
  const keyBuf = Buffer.isBuffer(key) ? key : Buffer.from(key);
  return { cert: certBuf, key: keyBuf, context, info: certificateInfoFromPem(certBuf, names.label ?? certFile) };
}

/** Reads and checks the pair named by the flags; a missing, unreadable or mismatched file is an Error naming it. */
export function loadPair(certFile: string | undefined, keyFile: string | undefined): LoadedPair {
  if (!certFile) throw new SchemaOptionError('tls_cert_file', '{enable_tls} needs {tls_cert_file}');
  if (!keyFile) throw new SchemaOptionError('tls_key_file', '{enable_tls} needs {tls_key_file}');
  const cert = readPem(certFile, 'TLS certificate file');
  const key = readPem(keyFile, 'TLS key file');
  return checkPair(cert, key, { certFile, keyFile });
}

/** Reads the TLS files named by the flags; a missing, unreadable or mismatched file is an Error naming it. */
export function loadTlsFiles(certFile: string | undefined, keyFile: string | undefined): TlsPair {
  const { cert, key } = loadPair(certFile, keyFile);
  return { cert, key };
}
