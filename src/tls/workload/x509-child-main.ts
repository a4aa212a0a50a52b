/**
 * The child process of ./x509-child.ts: reads one X509ChildRequest (JSON) on stdin, does it,
 * prints one X509ChildAnswer (JSON) on stdout and exits. It loads the X.509 library; its parent
 * never does. Each request loads only the modules it needs (the child's start is a workload's
 * wait for its certificate).
 */
import type { X509ChildAnswer, X509ChildRequest } from './x509-child.js';

async function handle(request: X509ChildRequest): Promise<string> {
  switch (request.op) {
    case 'csr': {
      const { createCsr, keyPairFromPem } = await import('./x509.js');
      return createCsr(await keyPairFromPem(request.keyPem), request.commonName);
    }
    case 'sign': {
      const [{ createCsr, keyPairFromPem }, { LocalCaSigner }] = await Promise.all([import('./x509.js'), import('./signer.js')]);
      const csrPem = request.csrPem ?? (request.keyPem !== undefined ? await createCsr(await keyPairFromPem(request.keyPem), request.service) : undefined);
      if (csrPem === undefined) throw new Error('a sign request needs csrPem or keyPem');
      return new LocalCaSigner(request.dir, request.trustDomain, { altNames: request.altNames }).sign(csrPem, request.service, request.ttlMs);
    }
    case 'init': {
      const { initCa } = await import('./ca.js');
      await initCa(request.dir, { trustDomain: request.trustDomain });
      return '';
    }
    default:
      throw new Error(`unknown X.509 child request ${JSON.stringify((request as { op?: unknown }).op)}`);
  }
}

async function main(): Promise<void> {
  const chunks: Buffer[] = [];
  for await (const chunk of process.stdin) chunks.push(chunk as Buffer);
  let answer: X509ChildAnswer;
  try {
    answer = { ok: await handle(JSON.parse(Buffer.concat(chunks).toString('utf8')) as X509ChildRequest) };
  } catch (err) {
    answer = { error: (err as Error).message ?? String(err), name: (err as Error).constructor?.name };
  }
  process.stdout.write(JSON.stringify(answer));
}

void main();
