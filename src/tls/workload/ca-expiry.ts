/**
 * How close the mesh CA in a directory is to expiring: the warnings `mesh ca status` prints and
 * `mesh check` reports (a root or the signing CA expired or expiring within EXPIRY_WARNING_DAYS,
 * no trusted root, no signing certificate).
 */
import { readRoots, readSignerCertificate } from './ca.js';

const DAY_MS = 86_400_000;
/** A certificate expiring within this many days is warned about. */
export const EXPIRY_WARNING_DAYS = 30;

export function iso(d: Date): string {
  return d.toISOString().replace(/\.\d{3}Z$/, 'Z');
}

export function daysLeft(d: Date, now: number): number {
  return Math.floor((d.getTime() - now) / DAY_MS);
}

/** The warning for one certificate, or undefined while it is valid for EXPIRY_WARNING_DAYS or more. */
export function expiryWarning(what: string, notAfter: Date, now: number, advice: string): string | undefined {
  const days = daysLeft(notAfter, now);
  if (notAfter.getTime() <= now) return `${what} has expired (${iso(notAfter)})`;
  if (days < EXPIRY_WARNING_DAYS) return `${what} expires in ${days} days (${iso(notAfter)}), within ${EXPIRY_WARNING_DAYS}: ${advice}`;
  return undefined;
}

/** The warnings about the CA in `dir` (which must exist). */
export function caExpiryWarnings(dir: string, now: number): string[] {
  const roots = readRoots(dir);
  const signer = readSignerCertificate(dir);
  const warnings: string[] = [];
  const check = (what: string, notAfter: Date) => {
    const w = expiryWarning(what, notAfter, now, 'rotate it (mesh ca rotate)');
    if (w) warnings.push(w);
  };
  for (const r of roots) check(`root ${r.serial}`, r.notAfter);
  if (signer && !roots.some((r) => r.cert.raw.equals(signer.raw))) check(`signing CA ${signer.serialNumber.toLowerCase()}`, new Date(signer.validTo));
  if (roots.length === 0) warnings.push(`no trusted root in ${dir}/roots`);
  if (!signer) warnings.push(`no signing certificate in ${dir}/signer.pem`);
  return warnings;
}
