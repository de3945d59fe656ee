"""What happens when a model works with skills: the tool loop, progressive disclosure, claim verification and activation evals."""
