#!/usr/bin/env python3
"""A calculator tool environment for ppo.cpp's multi-turn rollouts (rollout.multi_turn.environment.command).

    rollout.multi_turn.environment.command="python3 examples/tools/calculator.py"

Reads one JSON request per line on stdin ({"id", "index", "turn", "call", ...}, docs/multi-turn.md) and writes one
answer per line: {"output": "<the value>"} or {"output": "error: ..."}. The call is an arithmetic expression
(+ - * / // % ** and parentheses over integers and decimals), bare or as Hermes/Qwen-style JSON
{"name": "calculator", "arguments": {"expression": "..."}}. Evaluated with Python's ast, never eval(). The
trajectory goes on after every answer ("done" is never sent): the policy decides when it has its answer.
"""
import ast
import json
import operator
import sys

OPERATORS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
             ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow,
             ast.USub: operator.neg, ast.UAdd: operator.pos}


def evaluate(node):
    if isinstance(node, ast.Expression):
        return evaluate(node.body)
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in OPERATORS:
        left, right = evaluate(node.left), evaluate(node.right)
        if isinstance(node.op, ast.Pow) and abs(right) > 64:
            raise ValueError("exponent too large")
        return OPERATORS[type(node.op)](left, right)
    if isinstance(node, ast.UnaryOp) and type(node.op) in OPERATORS:
        return OPERATORS[type(node.op)](evaluate(node.operand))
    raise ValueError("only numbers, + - * / // % ** and parentheses")


def expression_of(call):
    text = call.strip()
    if text.startswith("{"):
        try:
            value = json.loads(text)
            arguments = value.get("arguments", {}) if isinstance(value, dict) else {}
            if isinstance(arguments, dict):
                text = str(arguments.get("expression", next(iter(arguments.values()), "")))
        except (json.JSONDecodeError, StopIteration):
            pass
    return text.replace("×", "*").replace("x", "*").replace("÷", "/").replace(",", "").strip()


def answer(call):
    try:
        value = evaluate(ast.parse(expression_of(call), mode="eval"))
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        return {"output": str(value)}
    except (SyntaxError, ValueError, TypeError, ZeroDivisionError, OverflowError, RecursionError) as e:
        return {"output": f"error: {e}"}


def main():
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        sys.stdout.write(json.dumps(answer(request.get("call", ""))) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
