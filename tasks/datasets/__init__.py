"""The data sets as the measuring clients and evaluators read them, Prefect-free: the prompt sets in each reference's
parquet or JSON schema (`prompts`), the Shopify product catalogue of Qwen3-VL (`shopify`), and the requests built
from them with the generation settings each reference asks for (`requests`)."""
