"""Chat format of the unified thinking model: ChatML with per-turn /think and /no_think."""

from cascadekit.chat.format import (
    EMPTY_THINK, END_OF_TURN, MARKUP_TOKENS, NO_THINK, THINK, AssistantTurn, chat_template,
    install_chat_template, parse_assistant, render, stop_token_ids, strip_flag, thinking_mode, turn_ids, with_flag,
)

__all__ = [
    "EMPTY_THINK", "END_OF_TURN", "MARKUP_TOKENS", "NO_THINK", "THINK", "AssistantTurn", "chat_template",
    "install_chat_template", "parse_assistant", "render", "stop_token_ids", "strip_flag", "thinking_mode",
    "turn_ids", "with_flag",
]
