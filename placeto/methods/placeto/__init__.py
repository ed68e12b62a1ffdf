"""Placeto (Addanki et al., NeurIPS 2019): a GNN policy that places one node per step of an MDP, trained with
REINFORCE on families of graphs."""
