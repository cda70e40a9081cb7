import type { ShapeNode } from '../shared/contracts/shape.js';

/** The answers of shared/contracts/sessions.ts whose shapes answer-shapes.ts holds. */
export declare const ANSWERS: readonly string[];
/** The text of shared/contracts/answer-shapes.ts for these shapes, by answer name. */
export declare function answerShapesModule(roots: Record<string, ShapeNode>): string;
