/** A file's bytes as the tools read them: strict UTF-8 text, in lines that keep their endings. */

/** Strict UTF-8 text, or null for binary / non-UTF-8 bytes. */
export function decodeText(bytes: Uint8Array): string | null {
  if (bytes.includes(0)) return null;
  try {
    return new TextDecoder('utf-8', { fatal: true }).decode(bytes);
  } catch {
    return null;
  }
}

/** Splits text into lines that keep their line endings; a final newline adds no empty line. */
export function splitLines(text: string): string[] {
  if (text === '') return [];
  return text.split(/(?<=\n)/);
}
