/** The setup phase's upstream world on this machine: shared with the bench (scripts/support/egress.ts). */
export * from '../../scripts/support/egress';
