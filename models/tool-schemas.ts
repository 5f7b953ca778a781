/**
 * Tool definitions for the providers, generated from the same zod schemas that validate calls,
 * with the texts of the run's prompt version (core/prompt.ts). OpenAI's strict function calling
 * needs every field required, so an optional field goes out as required and nullable; a null
 * argument then means "not given" and is dropped before validation.
 */
import { zodFunction } from 'openai/helpers/zod';
import { z } from 'zod';
import type { PromptRef, PromptTexts } from '../core/prompt';
import { describedArguments, toolNames } from '../core/tools';

/** A prompt version as a request is built from it: its content and reference. */
export interface Prompt {
  ref: PromptRef;
  texts: PromptTexts;
}

function strictWire(schema: z.ZodObject): z.ZodObject {
  const shape = Object.fromEntries(
    Object.entries(schema.shape).map(([key, field]) => {
      const f = field as z.ZodType;
      return [key, f instanceof z.ZodOptional ? (f.unwrap() as z.ZodType).nullable().describe(f.description ?? '') : f];
    }),
  );
  return z.strictObject(shape);
}

const built = new Map<string, unknown[]>();

/** Definitions built once per process for each prompt (by digest), API and tool set. */
function cached(api: string, prompt: Prompt, orchestrating: boolean, make: () => unknown[]): unknown[] {
  const key = `${api}:${prompt.ref.digest}:${orchestrating}`;
  if (!built.has(key)) built.set(key, make());
  return built.get(key)!;
}

/** The tools for Chat Completions; `orchestrating` adds the sub-run tools. */
export function openaiTools(prompt: Prompt, orchestrating = false): unknown[] {
  // Round-tripped through JSON: the helper attaches parse functions that are not part of the wire format.
  return cached('openai', prompt, orchestrating, () =>
    toolNames(orchestrating).map((name) =>
      JSON.parse(
        JSON.stringify(
          zodFunction({
            name,
            description: prompt.texts.tools[name].description,
            parameters: strictWire(describedArguments(name, prompt.texts.tools)),
          }),
        ),
      ),
    ),
  );
}

export function anthropicTools(prompt: Prompt, orchestrating = false): unknown[] {
  return cached('anthropic', prompt, orchestrating, () =>
    toolNames(orchestrating).map((name) => {
      const { $schema: _drop, ...schema } = z.toJSONSchema(describedArguments(name, prompt.texts.tools), { io: 'input' }) as Record<
        string,
        unknown
      >;
      return { name, description: prompt.texts.tools[name].description, input_schema: schema };
    }),
  );
}

/** Arguments from the wire: nulls stand for fields not given. */
export function dropNulls(args: unknown): unknown {
  if (args === null || typeof args !== 'object' || Array.isArray(args)) return args;
  return Object.fromEntries(Object.entries(args).filter(([, v]) => v !== null));
}
