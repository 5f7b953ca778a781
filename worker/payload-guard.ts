/**
 * Every payload this worker puts into Temporal history (activity inputs and results, workflow
 * commands, continue-as-new input, the workflow result) passes this codec. The workflow and the
 * activities keep contents in the host store and carry digests and short views, so a payload
 * over the cap is a harness defect: it fails loudly here instead of growing history towards
 * Temporal's 2 MiB payload limit and losing the run.
 */
import type { Payload, PayloadCodec } from '@temporalio/common';
import { nonRetryable } from '../core/failures';

export const MAX_PAYLOAD_BYTES = 64 * 1024;

export class PayloadSizeGuard implements PayloadCodec {
  constructor(private readonly maxBytes = MAX_PAYLOAD_BYTES) {}

  async encode(payloads: Payload[]): Promise<Payload[]> {
    for (const p of payloads) {
      const bytes = p.data?.length ?? 0;
      if (bytes > this.maxBytes) {
        const head = Buffer.from(p.data!.subarray(0, 120)).toString('utf8');
        // Typed explicitly (core/failures.ts): an activity result refused here fails the activity, not retried.
        throw nonRetryable('PayloadTooLarge', `a ${bytes}-byte payload exceeds the ${this.maxBytes}-byte cap of this harness: ${head}…`);
      }
    }
    return payloads;
  }

  async decode(payloads: Payload[]): Promise<Payload[]> {
    return payloads;
  }
}
