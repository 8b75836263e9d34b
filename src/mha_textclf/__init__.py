"""mha-textclf: compare multi-head attention implementations on a real text-classification task."""
