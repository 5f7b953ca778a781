import { defineSearchAttributeKey, SearchAttributeType } from '@temporalio/common';

/** Custom search attributes agentRun upserts; they must be registered on the namespace. */
export const STATUS_ATTRIBUTE = defineSearchAttributeKey('AgentStatus', SearchAttributeType.KEYWORD);
export const FIXTURE_ATTRIBUTE = defineSearchAttributeKey('AgentFixture', SearchAttributeType.KEYWORD);
export const REASON_ATTRIBUTE = defineSearchAttributeKey('AgentReason', SearchAttributeType.KEYWORD);

export const SEARCH_ATTRIBUTES = [STATUS_ATTRIBUTE, FIXTURE_ATTRIBUTE, REASON_ATTRIBUTE];
